// GELU, the exact form nanoGPT's nn.GELU() uses (not the tanh approximation).
#include <cmath>
#include <numbers>

#include "nn/autograd.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {

// forward:  y = x · Φ(x) = 0.5 · x · (1 + erf(x / √2))
// backward: dx += dy · (Φ(x) + x · φ(x)),   φ(x) = exp(-x²/2) / √(2π)
Tensor gelu(const Tensor& x) {
  const int64_t n = x.numel();
  profile::Scope scope("gelu", 8.0 * n);  // read x, write y
  bool track = autograd::needs_grad({&x});
  Tensor y = Tensor::empty(x.shape(), track);
  const float* xd = x.data();
  float* yd = y.data();
  constexpr float inv_sqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) yd[i] = 0.5f * xd[i] * (1.0f + std::erf(xd[i] * inv_sqrt2));

  if (track) {
    autograd::record([x, y, n]() mutable {
      profile::Scope backward_scope("gelu", 12.0 * n);  // read x, dy; write dx
      constexpr float inv_sqrt_2pi = static_cast<float>(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
      const float* xv = x.data();
      const float* dy = y.grad();
      auto [dx, accumulate] = x.grad_target();  // a fresh buffer is overwritten, not added to
      auto derivative = [](float v) {
        float cdf = 0.5f * (1.0f + std::erf(v * inv_sqrt2));
        float pdf = inv_sqrt_2pi * std::exp(-0.5f * v * v);
        return cdf + v * pdf;
      };
      if (accumulate) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
        for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * derivative(xv[i]);
      } else {
#pragma omp parallel for simd schedule(static) if (n > 32768)
        for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * derivative(xv[i]);
      }
    });
  }
  return y;
}

}  // namespace nn
