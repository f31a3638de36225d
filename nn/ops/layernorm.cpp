// LayerNorm over the last dimension, fused: one pass for the statistics, one for the output.
#include <cmath>
#include <utility>
#include <omp.h>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {
namespace {

// Parallel loops only above this many elements: below, a thread team costs more than it saves.
constexpr int64_t kThreadedFrom = 32768;

// One row: y = (x − μ)·σ⁻¹ ⊙ w + b; returns (μ, σ⁻¹).
std::pair<float, float> normalize_row(const float* xr, const float* w, const float* b, float* yr, int64_t C,
                                      float eps) {
  float sum = 0.0f;
  for (int64_t j = 0; j < C; ++j) sum += xr[j];
  float mu = sum / C;
  float var = 0.0f;
  for (int64_t j = 0; j < C; ++j) var += (xr[j] - mu) * (xr[j] - mu);
  float rstd = 1.0f / std::sqrt(var / C + eps);
  for (int64_t j = 0; j < C; ++j) yr[j] = (xr[j] - mu) * rstd * w[j] + (b ? b[j] : 0.0f);
  return {mu, rstd};
}

// One row's backward: adds dy ⊙ x̂ and dy into this thread's dweight/dbias sums (pw, pb), and
// writes (or adds) dx when dxr is not null.
void row_backward(const float* xr, const float* dyr, const float* wv, float mu, float rstd, int64_t C, float* pw,
                  float* pb, float* dxr, bool accumulate) {
  float mean_g = 0.0f, mean_gx = 0.0f;
  for (int64_t j = 0; j < C; ++j) {
    float xhat = (xr[j] - mu) * rstd, g = dyr[j] * wv[j];
    mean_g += g;
    mean_gx += g * xhat;
    pw[j] += dyr[j] * xhat;
    pb[j] += dyr[j];
  }
  mean_g /= C;
  mean_gx /= C;
  if (!dxr) return;
  for (int64_t j = 0; j < C; ++j) {
    float xhat = (xr[j] - mu) * rstd;
    const float g = rstd * (dyr[j] * wv[j] - mean_g - xhat * mean_gx);
    dxr[j] = accumulate ? dxr[j] + g : g;
  }
}

}  // namespace

// forward (each row x[C]):  μ = mean(x), σ⁻¹ = 1/√(var(x) + eps)   (biased variance)
//                           x̂ = (x − μ)·σ⁻¹,   y = x̂ ⊙ weight + bias
// backward:  g = dy ⊙ weight
//            dx += σ⁻¹ · (g − mean(g) − x̂ · mean(g ⊙ x̂))
//            dweight += Σ_rows dy ⊙ x̂,   dbias += Σ_rows dy
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  const int64_t C = x.size(-1), rows = x.numel() / C;
  if (weight.numel() != C || (bias.defined() && bias.numel() != C))
    fail("layernorm: input {} does not fit weight {}", shape_string(x.shape()), shape_string(weight.shape()));
  profile::Scope scope("layernorm", 8.0 * rows * C);  // read x, write y
  bool track = autograd::needs_grad({&x, &weight, &bias});
  Tensor y = Tensor::empty(x.shape(), track);
  Tensor stats = Tensor::empty({rows, 2});  // (μ, σ⁻¹) per row, kept for backward
  const float *xd = x.data(), *w = weight.data(), *b = bias.defined() ? bias.data() : nullptr;
  float *yd = y.data(), *st = stats.data();

#pragma omp parallel for schedule(static) if (rows * C > kThreadedFrom)
  for (int64_t r = 0; r < rows; ++r) {
    const auto [mu, rstd] = normalize_row(xd + r * C, w, b, yd + r * C, C, eps);
    st[2 * r] = mu;
    st[2 * r + 1] = rstd;
  }
  if (!track) return y;

  autograd::record([x, weight, bias, y, stats, rows, C]() mutable {
    profile::Scope backward_scope("layernorm", 12.0 * rows * C);  // read x, dy; write dx
    const float *xv = x.data(), *wv = weight.data(), *dy = y.grad(), *saved = stats.data();
    Tensor::GradTarget dx_target{nullptr, true};
    if (x.requires_grad()) dx_target = x.grad_target();
    // Each thread sums its rows' dweight/dbias into its own slot [2, C]; the slots are added after.
    const int threads = omp_get_max_threads();
    Tensor partial = Tensor::zeros({threads, 2, C});
    float* pd = partial.data();
#pragma omp parallel if (rows * C > kThreadedFrom)
    {
      float* pw = pd + omp_get_thread_num() * 2 * C;
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r)
        row_backward(xv + r * C, dy + r * C, wv, saved[2 * r], saved[2 * r + 1], C, pw, pw + C,
                     dx_target.data ? dx_target.data + r * C : nullptr, dx_target.accumulate);
    }
    float* dw = weight.requires_grad() ? weight.grad() : nullptr;
    float* db = bias.defined() && bias.requires_grad() ? bias.grad() : nullptr;
    for (int t = 0; t < threads; ++t)
      for (int64_t j = 0; j < C; ++j) {
        if (dw) dw[j] += pd[(t * 2) * C + j];
        if (db) db[j] += pd[(t * 2 + 1) * C + j];
      }
  });
  return y;
}

}  // namespace nn
