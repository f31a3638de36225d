#include "nn/adamw.hpp"
#include "nn/profile.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include <omp.h>

namespace nn {

AdamW::AdamW(std::vector<NamedTensor> parameters, AdamWConfig config, AdamWKernel kernel)
    : parameters_(std::move(parameters)), config_(config), kernel_(kernel) {
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

namespace {

// Elements [from, to) of one tensor, in torch.optim.AdamW's single-tensor order of operations.
void update_slice(const AdamWTensor& t, int64_t from, int64_t to, const AdamWScalars& s) {
  float *w = t.w, *m = t.m, *v = t.v;
  const float* g = t.g;
  const float decay = t.decay, b1 = s.beta1, b2 = s.beta2, eps = s.eps, step_size = s.step_size;
  const float c2 = s.correction2_sqrt;
#pragma omp simd
  for (int64_t j = from; j < to; ++j) {
    w[j] *= decay;
    m[j] = m[j] * b1 + g[j] * (1.0f - b1);
    v[j] = v[j] * b2 + (1.0f - b2) * g[j] * g[j];
    const float denom = std::sqrt(v[j]) / c2 + eps;
    w[j] -= step_size * m[j] / denom;
  }
}

// This thread's share [begin, end) of `total` elements.
std::pair<int64_t, int64_t> my_share(int64_t total) {
  const int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
  return {total * me / threads, total * (me + 1) / threads};
}

}  // namespace

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float decay, const AdamWScalars& s) {
  profile::Scope scope("AdamW", 28.0 * n);  // read w, g, m, v; write w, m, v
  const AdamWTensor tensor{w, g, m, v, n, decay};
#pragma omp parallel if (n > 65536)
  {
    const auto [begin, end] = my_share(n);
    update_slice(tensor, begin, end, s);
  }
}

void adamw_update_fused(const std::vector<AdamWTensor>& tensors, const AdamWScalars& s) {
  int64_t total = 0;
  for (const AdamWTensor& t : tensors) total += t.n;
  profile::Scope scope("AdamW", 28.0 * total);
#pragma omp parallel if (total > 65536)
  {
    const auto [begin, end] = my_share(total);  // of all the tensors' elements laid end to end
    int64_t first = 0;                          // index of this tensor's first element among them
    for (const AdamWTensor& t : tensors) {
      const int64_t from = std::max(begin, first) - first, to = std::min(end, first + t.n) - first;
      if (from < to) update_slice(t, from, to, s);
      first += t.n;
    }
  }
}

void AdamW::step(float lr) {
  ++steps_;
  const AdamWScalars s = AdamWScalars::at(config_, steps_, lr);
  if (kernel_ == AdamWKernel::per_tensor) {
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      Tensor& p = parameters_[i].tensor;
      adamw_update(p.data(), p.grad(), exp_avg_[i].data(), exp_avg_sq_[i].data(), p.numel(), s.decay(p.ndim() >= 2),
                   s);
    }
    return;
  }
  fused_tensors_.clear();  // keeps its capacity: no allocation after the first step
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    Tensor& p = parameters_[i].tensor;
    fused_tensors_.push_back({p.data(), p.grad(), exp_avg_[i].data(), exp_avg_sq_[i].data(), p.numel(),
                              s.decay(p.ndim() >= 2)});
  }
  adamw_update_fused(fused_tensors_, s);
}

void AdamW::zero_grad() {
  profile::Scope scope("zero grads");
  for (auto& p : parameters_) p.tensor.zero_grad();
}

}  // namespace nn
