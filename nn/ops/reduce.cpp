// Sum and mean of all elements (accumulated in double, so long tensors lose no precision).
#include "nn/autograd.hpp"
#include "nn/ops.hpp"

namespace nn {
namespace {

// forward: out = s · Σ_i x_i        backward: dx_i += s · dout
Tensor scaled_sum(const Tensor& x, float s) {
  const int64_t n = x.numel();
  bool track = autograd::needs_grad({&x});
  Tensor out = Tensor::empty({}, track);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += x.data()[i];
  out.data()[0] = static_cast<float>(s * total);
  if (track) {
    autograd::record([x, out, s, n]() mutable {
      const float d = s * out.grad()[0];
      float* dx = x.grad();
      for (int64_t i = 0; i < n; ++i) dx[i] += d;
    });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return scaled_sum(x, 1.0f); }
Tensor mean(const Tensor& x) { return scaled_sum(x, 1.0f / static_cast<float>(x.numel())); }

}  // namespace nn
