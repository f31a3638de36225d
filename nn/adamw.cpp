#include "nn/adamw.hpp"
#include "nn/profile.hpp"

#include <cmath>

namespace nn {

AdamW::AdamW(std::vector<NamedTensor> parameters, AdamWConfig config)
    : parameters_(std::move(parameters)), config_(config) {
  for (auto& p : parameters_) {
    exp_avg_.push_back(Tensor::zeros(p.tensor.shape()));
    exp_avg_sq_.push_back(Tensor::zeros(p.tensor.shape()));
  }
}

AdamWScalars AdamWScalars::at(const AdamWConfig& config, int64_t step, float lr) {
  // As PyTorch: the corrections in double, then used as float scalars.
  const double correction1 = 1.0 - std::pow(static_cast<double>(config.beta1), static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(static_cast<double>(config.beta2), static_cast<double>(step));
  return {config.beta1,
          config.beta2,
          config.eps,
          static_cast<float>(lr / correction1),
          static_cast<float>(std::sqrt(correction2)),
          lr,
          config.weight_decay};
}

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float decay, const AdamWScalars& s) {
  profile::Scope scope("AdamW", 28.0 * n);  // read w, g, m, v; write w, m, v
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, step_size = s.step_size, c2 = s.correction2_sqrt;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t j = 0; j < n; ++j) {
    w[j] *= decay;
    m[j] = m[j] * b1 + g[j] * (1.0f - b1);
    v[j] = v[j] * b2 + (1.0f - b2) * g[j] * g[j];
    const float denom = std::sqrt(v[j]) / c2 + eps;
    w[j] -= step_size * m[j] / denom;
  }
}

void AdamW::step(float lr) {
  ++steps_;
  const AdamWScalars s = AdamWScalars::at(config_, steps_, lr);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    Tensor& p = parameters_[i].tensor;
    adamw_update(p.data(), p.grad(), exp_avg_[i].data(), exp_avg_sq_[i].data(), p.numel(), s.decay(p.ndim() >= 2), s);
  }
}

void AdamW::zero_grad() {
  profile::Scope scope("zero grads");
  for (auto& p : parameters_) p.tensor.zero_grad();
}

}  // namespace nn
