// GELU, the exact form nanoGPT's nn.GELU() uses (not the tanh approximation), and bias + GELU
// in one pass (the MLP's c_fc when the model has biases).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/ops.hpp"
#include "nn/ops/row_sums.hpp"
#include "nn/profile.hpp"

namespace nn {
namespace {

constexpr float inv_sqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
constexpr float inv_sqrt_2pi = static_cast<float>(std::numbers::inv_sqrtpi / std::numbers::sqrt2);

// gelu(v) = v · Φ(v) = 0.5 · v · (1 + erf(v / √2))
inline float gelu_of(float v) { return 0.5f * v * (1.0f + std::erf(v * inv_sqrt2)); }
// gelu'(v) = Φ(v) + v · φ(v),   φ(v) = exp(-v²/2) / √(2π)
inline float gelu_slope(float v) {
  const float cdf = 0.5f * (1.0f + std::erf(v * inv_sqrt2));
  const float pdf = inv_sqrt_2pi * std::exp(-0.5f * v * v);
  return cdf + v * pdf;
}

// use(i, math(value(i))) for i < n, math always on whole 16-lane vectors — the 16-lane erf
// and exp of glibc's libmvec — a short tail too (padded with copies of the last value). The
// scalar erf rounds differently, so where a loop's remainder fell (a row's end, a thread's
// share) would otherwise decide an element's bits; so bias_gelu's rows and gelu's flat pass
// give the same bits as each other.
constexpr int64_t kLanes = 16;
template <class Math, class Value, class Use>
void in_whole_vectors(int64_t n, Math math, Value value, Use use) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t k = 0; k < kLanes; ++k) use(i + k, math(value(i + k)));
  }
  if (i == n) return;
  float tail[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) tail[k] = value(std::min(i + k, n - 1));
#pragma omp simd
  for (int64_t k = 0; k < kLanes; ++k) tail[k] = math(tail[k]);
  for (int64_t k = 0; i + k < n; ++k) use(i + k, tail[k]);
}

// The flat passes split into blocks of this many values, one thread each.
constexpr int64_t kBlock = 4096;
int64_t blocks_of(int64_t n) { return (n + kBlock - 1) / kBlock; }

}  // namespace

// forward:  y = gelu(x)
// backward: dx += dy · gelu'(x)
Tensor gelu(const Tensor& x) {
  const int64_t n = x.numel();
  profile::Scope scope("gelu", 8.0 * n);  // read x, write y
  bool track = autograd::needs_grad({&x});
  Tensor y = Tensor::empty(x.shape(), track);
  const float* xd = x.data();
  float* yd = y.data();
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t block = 0; block < blocks_of(n); ++block) {
    const float* in = xd + block * kBlock;
    float* out = yd + block * kBlock;
    in_whole_vectors(
        std::min(kBlock, n - block * kBlock), gelu_of, [in](int64_t i) { return in[i]; },
        [out](int64_t i, float v) { out[i] = v; });
  }

  if (track) {
    autograd::record([x, y, n]() mutable {
      profile::Scope backward_scope("gelu", 12.0 * n);  // read x, dy; write dx
      const float* xv = x.data();
      const float* dy = y.grad();
      auto [dx, accumulate] = x.grad_target();  // a fresh buffer is overwritten, not added to
#pragma omp parallel for schedule(static) if (n > 32768)
      for (int64_t block = 0; block < blocks_of(n); ++block) {
        const int64_t at = block * kBlock;
        auto value = [xv, at](int64_t i) { return xv[at + i]; };
        if (accumulate)
          in_whole_vectors(std::min(kBlock, n - at), gelu_slope, value,
                           [dx, dy, at](int64_t i, float s) { dx[at + i] += dy[at + i] * s; });
        else
          in_whole_vectors(std::min(kBlock, n - at), gelu_slope, value,
                           [dx, dy, at](int64_t i, float s) { dx[at + i] = dy[at + i] * s; });
      }
    });
  }
  return y;
}

// Shapes: x [R, N] (R = all leading dimensions), bias [N].
// forward:  y = gelu(x + bias), the bias added to every row    (x + bias is not kept: backward adds again)
// backward: g = dy · gelu'(x + bias),  dx += g,  dbias += Σ_rows g
// The same bits as add(x, bias) then gelu (x + bias rounds alike, every value takes the same
// vector erf), and as linear's bias then gelu where the GEMM adds its whole sum to the bias
// at once (K within one of its depth blocks: the tests' K = 32, 40); a GEMM that adds partial
// sums into C block by block rounds the bias in earlier. dbias: linear's row sums exactly.
Tensor bias_gelu(const Tensor& x, const Tensor& bias) {
  const int64_t cols = x.size(-1), n = x.numel();
  if (bias.ndim() != 1 || bias.size(0) != cols)
    fail("bias_gelu: bias {} does not fit input {}", shape_string(bias.shape()), shape_string(x.shape()));
  const int64_t rows = x.rows_of_last("bias_gelu");
  profile::Scope scope("bias + gelu", 8.0 * n);  // read x, write y (the bias stays in cache)
  bool track = autograd::needs_grad({&x, &bias});
  Tensor y = Tensor::empty(x.shape(), track);
  const float *xd = x.data(), *bd = bias.data();
  float* yd = y.data();
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = xd + r * cols;
    float* out = yd + r * cols;
    in_whole_vectors(
        cols, gelu_of, [in, bd](int64_t c) { return in[c] + bd[c]; }, [out](int64_t c, float v) { out[c] = v; });
  }

  if (track) {
    autograd::record([x, bias, y, rows, cols, n]() mutable {
      profile::Scope backward_scope("bias + gelu", 12.0 * n);  // read x, dy; write dx
      const float *xv = x.data(), *bv = bias.data(), *dy = y.grad();
      // g goes straight into x's gradient when that is fresh (dbias then reads it back), else
      // into a buffer of its own, added in after.
      const Tensor::GradTarget target = x.requires_grad() ? x.grad_target() : Tensor::GradTarget{nullptr, false};
      Tensor own;
      float* g = target.data;
      if (!g || target.accumulate) {
        own = Tensor::empty(x.shape());
        g = own.data();
      }
#pragma omp parallel for schedule(static) if (n > 32768)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = r * cols;
        in_whole_vectors(
            cols, gelu_slope, [xv, bv, at](int64_t c) { return xv[at + c] + bv[c]; },
            [g, dy, at](int64_t c, float s) { g[at + c] = dy[at + c] * s; });
      }
      if (target.data && target.accumulate) {
        float* dx = target.data;
#pragma omp parallel for simd schedule(static) if (n > 32768)
        for (int64_t i = 0; i < n; ++i) dx[i] += g[i];
      }
      if (bias.requires_grad()) add_row_sums(g, rows, cols, bias.grad());
    });
  }
  return y;
}

}  // namespace nn
