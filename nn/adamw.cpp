#include "nn/adamw.hpp"

#include <cmath>

namespace nn {

AdamW::AdamW(std::vector<NamedTensor> parameters, AdamWConfig config)
    : parameters_(std::move(parameters)), config_(config) {
  for (auto& p : parameters_) {
    exp_avg_.push_back(Tensor::zeros(p.tensor.shape()));
    exp_avg_sq_.push_back(Tensor::zeros(p.tensor.shape()));
  }
}

void AdamW::step(float lr) {
  ++steps_;
  const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  // As PyTorch: the corrections in double, then used as float scalars.
  const double correction1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(steps_));
  const double correction2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(steps_));
  const float step_size = static_cast<float>(lr / correction1);
  const float correction2_sqrt = static_cast<float>(std::sqrt(correction2));
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    Tensor& p = parameters_[i].tensor;
    const float decay = p.ndim() >= 2 ? 1.0f - lr * config_.weight_decay : 1.0f;
    float *w = p.data(), *m = exp_avg_[i].data(), *v = exp_avg_sq_[i].data();
    const float* g = p.grad();
    const int64_t n = p.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t j = 0; j < n; ++j) {
      w[j] *= decay;
      m[j] = m[j] * b1 + g[j] * (1.0f - b1);
      v[j] = v[j] * b2 + (1.0f - b2) * g[j] * g[j];
      const float denom = std::sqrt(v[j]) / correction2_sqrt + eps;
      w[j] -= step_size * m[j] / denom;
    }
  }
}

void AdamW::zero_grad() {
  for (auto& p : parameters_) p.tensor.zero_grad();
}

}  // namespace nn
