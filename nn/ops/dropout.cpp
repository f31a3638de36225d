// Dropout: during training, zero each element with probability p and scale the survivors by
// 1/(1−p) so the expected value is unchanged.
#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {

// forward:  y_i = x_i · m_i / (1 − p),   m_i = 1 with probability 1 − p (hash of stream, i)
// backward: dx_i += dy_i · m_i / (1 − p)
Tensor dropout(const Tensor& x, float p, Rng& rng) {
  if (p < 0.0f || p >= 1.0f) fail("dropout: p must be in [0, 1), got {}", p);
  if (p == 0.0f) return x;
  const uint64_t stream = rng.next_u64();
  const int64_t n = x.numel();
  profile::Scope scope("dropout", 8.0 * n);  // read x, write y
  const float kept_scale = 1.0f / (1.0f - p);
  auto factor = [stream, p, kept_scale](int64_t i) {
    return unit_float(hash64(stream, static_cast<uint64_t>(i))) < p ? 0.0f : kept_scale;
  };
  bool track = autograd::needs_grad({&x});
  Tensor y = Tensor::empty(x.shape(), track);
  const float* xd = x.data();
  float* yd = y.data();
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) yd[i] = xd[i] * factor(i);
  if (track) {
    autograd::record([x, y, n, factor]() mutable {
      profile::Scope backward_scope("dropout", 12.0 * n);  // read dy, dx; write dx
      float* dx = x.grad();
      const float* dy = y.grad();
#pragma omp parallel for schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * factor(i);
    });
  }
  return y;
}

}  // namespace nn
