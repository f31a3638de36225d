// LayerNorm over the last dimension, fused: one pass for the statistics, one for the output;
// and the residual add before it fused in (add_layernorm).
#include <algorithm>
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

// One row: y = (x − μ)·σ⁻¹ ⊙ w + b; returns (μ, σ⁻¹). Not inlined, here and below: layernorm
// and add_layernorm then run the same machine code per row, so the same bits (GCC could
// otherwise vectorise the sums differently at each call site under -ffast-math).
[[gnu::noinline]] std::pair<float, float> normalize_row(const float* xr, const float* w, const float* b, float* yr,
                                                        int64_t C, float eps) {
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
[[gnu::noinline]] void row_backward(const float* xr, const float* dyr, const float* wv, float mu, float rstd,
                                    int64_t C, float* pw, float* pb, float* dxr, bool accumulate) {
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

// The dweight/dbias sums of rows [0, rows): each thread sums its rows into its own slot [2, C]
// of `partial`, and the slots are added after (a fixed order: the same bits every run).
// row(r, pw, pb) runs one row's backward with this thread's slot.
template <class RowBackward>
void backward_rows(int64_t rows, int64_t C, const Tensor& weight, const Tensor& bias, RowBackward row) {
  const int threads = omp_get_max_threads();
  Tensor partial = Tensor::zeros({threads, 2, C});
  float* pd = partial.data();
#pragma omp parallel if (rows * C > kThreadedFrom)
  {
    float* pw = pd + omp_get_thread_num() * 2 * C;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) row(r, pw, pw + C);
  }
  float* dw = weight.requires_grad() ? weight.grad() : nullptr;
  float* db = bias.defined() && bias.requires_grad() ? bias.grad() : nullptr;
  for (int t = 0; t < threads; ++t)
    for (int64_t j = 0; j < C; ++j) {
      if (dw) dw[j] += pd[(t * 2) * C + j];
      if (db) db[j] += pd[(t * 2 + 1) * C + j];
    }
}

void check_fits(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const int64_t C = x.size(-1);
  x.rows_of_last(op);  // refuses an empty last dimension
  if (weight.numel() != C || (bias.defined() && bias.numel() != C))
    fail("{}: input {} does not fit weight {}", op, shape_string(x.shape()), shape_string(weight.shape()));
}

}  // namespace

// forward (each row x[C]):  μ = mean(x), σ⁻¹ = 1/√(var(x) + eps)   (biased variance)
//                           x̂ = (x − μ)·σ⁻¹,   y = x̂ ⊙ weight + bias
// backward:  g = dy ⊙ weight
//            dx += σ⁻¹ · (g − mean(g) − x̂ · mean(g ⊙ x̂))
//            dweight += Σ_rows dy ⊙ x̂,   dbias += Σ_rows dy
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  check_fits("layernorm", x, weight, bias);
  const int64_t C = x.size(-1), rows = x.numel() / C;
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
    Tensor::GradTarget dx{nullptr, true};
    if (x.requires_grad()) dx = x.grad_target();
    backward_rows(rows, C, weight, bias, [&](int64_t r, float* pw, float* pb) {
      row_backward(xv + r * C, dy + r * C, wv, saved[2 * r], saved[2 * r + 1], C, pw, pb,
                   dx.data ? dx.data + r * C : nullptr, dx.accumulate);
    });
  });
  return y;
}

// The residual add and the layernorm after it, one pass over each row (s stays in L1 between):
//   forward:  s = x + h,  y = layernorm(s)                 returns {s, y}
//   backward: ds = ds_later + layernorm'(dy),  dx += ds,  dh += ds
// The same operations in the same order as add then layernorm: the same bits (tested).
std::pair<Tensor, Tensor> add_layernorm(const Tensor& x, const Tensor& h, const Tensor& weight, const Tensor& bias,
                                        float eps) {
  if (x.shape() != h.shape())
    fail("add_layernorm: shapes {} and {} differ", shape_string(x.shape()), shape_string(h.shape()));
  check_fits("add_layernorm", x, weight, bias);
  const int64_t C = x.size(-1), rows = x.numel() / C;
  profile::Scope scope("add + layernorm", 16.0 * rows * C);  // read x, h; write s, y
  // s needs a gradient only when x or h does (as add's output); y also when weight or bias does.
  const bool stream_track = autograd::needs_grad({&x, &h}), track = autograd::needs_grad({&x, &h, &weight, &bias});
  Tensor sum = Tensor::empty(x.shape(), stream_track), y = Tensor::empty(x.shape(), track);
  Tensor stats = Tensor::empty({rows, 2});
  const float *xd = x.data(), *hd = h.data(), *w = weight.data(), *b = bias.defined() ? bias.data() : nullptr;
  float *sd = sum.data(), *yd = y.data(), *st = stats.data();

#pragma omp parallel for schedule(static) if (rows * C > kThreadedFrom)
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = sd + r * C;
    for (int64_t j = 0; j < C; ++j) sr[j] = xd[r * C + j] + hd[r * C + j];
    const auto [mu, rstd] = normalize_row(sr, w, b, yd + r * C, C, eps);
    st[2 * r] = mu;
    st[2 * r + 1] = rstd;
  }
  if (!track) return {sum, y};

  autograd::record([x, h, weight, bias, sum, y, stats, rows, C]() mutable {
    profile::Scope backward_scope("add + layernorm", 20.0 * rows * C);  // read s, dy, ds; write dx, dh
    const float *sv = sum.data(), *wv = weight.data(), *dy = y.grad(), *saved = stats.data();
    // ds gathers the later uses' gradient (the residual stream's) and layernorm's: in s's own
    // gradient buffer when it has one, else in a fresh one. Without x or h to pass it on to,
    // only dweight and dbias are wanted.
    Tensor::GradTarget ds{nullptr, true}, dx{nullptr, true}, dh{nullptr, true};
    if (sum.requires_grad()) ds = sum.grad_target();
    if (x.requires_grad()) dx = x.grad_target();
    if (h.requires_grad()) dh = h.grad_target();
    auto pass_on = [C](const float* from, const Tensor::GradTarget& to, int64_t r) {
      if (!to.data) return;
      float* out = to.data + r * C;
      if (to.accumulate)
        for (int64_t j = 0; j < C; ++j) out[j] += from[j];
      else
        std::copy_n(from, C, out);
    };
    backward_rows(rows, C, weight, bias, [&](int64_t r, float* pw, float* pb) {
      float* dsr = ds.data ? ds.data + r * C : nullptr;
      row_backward(sv + r * C, dy + r * C, wv, saved[2 * r], saved[2 * r + 1], C, pw, pb, dsr, ds.accumulate);
      if (!dsr) return;
      pass_on(dsr, dx, r);
      pass_on(dsr, dh, r);
    });
  });
  return {sum, y};
}

std::pair<Tensor, Tensor> add_pending_layernorm(const Tensor& x, const Tensor& pending, const Tensor& weight,
                                                const Tensor& bias) {
  if (pending.defined()) return add_layernorm(x, pending, weight, bias);
  return {x, layernorm(x, weight, bias)};
}

}  // namespace nn
