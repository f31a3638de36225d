// Addition with broadcasting, elementwise product, scaling.
#include <algorithm>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {

// forward:  out[r, j] = a[r, j] + b[j]        (a viewed as [R, n], b as [n]; n = b.numel())
// backward: da += dout                         db[j] += Σ_r dout[r, j]
Tensor add(const Tensor& a, const Tensor& b) {
  const int an = a.ndim(), bn = b.ndim();
  bool fits = bn <= an && std::equal(b.shape().begin(), b.shape().end(), a.shape().end() - bn);
  if (!fits) fail("add: shape {} does not broadcast onto {}", shape_string(b.shape()), shape_string(a.shape()));
  const int64_t n = b.numel(), rows = n == 0 ? 0 : a.numel() / n;
  profile::Scope scope("add (residual, position)", 4.0 * (2 * rows * n + n));  // read a, b; write out
  bool track = autograd::needs_grad({&a, &b});
  Tensor out = Tensor::empty(a.shape(), track);
  const float *ad = a.data(), *bd = b.data();
  float* od = out.data();
#pragma omp parallel for schedule(static) if (rows * n > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) od[r * n + j] = ad[r * n + j] + bd[j];

  if (track) {
    autograd::record([a, b, out, rows, n]() mutable {
      profile::Scope backward_scope("add (residual, position)", 4.0 * (2 * rows * n + 2 * n));  // read dout (twice), write da, db
      const float* dout = out.grad();
      if (a.requires_grad()) {
        auto da = a.grad_target();
        const int64_t total = rows * n;
        if (da.accumulate) {
#pragma omp parallel for schedule(static) if (total > 65536)
          for (int64_t i = 0; i < total; ++i) da.data[i] += dout[i];
        } else {
          std::copy_n(dout, total, da.data);
        }
      }
      if (b.requires_grad() && rows == 1) {  // same shape (a residual connection): like da
        auto db = b.grad_target();
        if (db.accumulate) {
#pragma omp parallel for schedule(static) if (n > 65536)
          for (int64_t j = 0; j < n; ++j) db.data[j] += dout[j];
        } else {
          std::copy_n(dout, n, db.data);
        }
      } else if (b.requires_grad()) {
        float* db = b.grad();
#pragma omp parallel for schedule(static) if (rows * n > 65536)
        for (int64_t j = 0; j < n; ++j) {
          float s = 0.0f;
          for (int64_t r = 0; r < rows; ++r) s += dout[r * n + j];
          db[j] += s;
        }
      }
    });
  }
  return out;
}

Tensor add_pending(const Tensor& x, const Tensor& pending) { return pending.defined() ? add(x, pending) : x; }

// forward: out = a ⊙ b        backward: da += dout ⊙ b, db += dout ⊙ a
Tensor mul(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) fail("mul: shapes {} and {} differ", shape_string(a.shape()), shape_string(b.shape()));
  const int64_t n = a.numel();
  bool track = autograd::needs_grad({&a, &b});
  Tensor out = Tensor::empty(a.shape(), track);
  const float *ad = a.data(), *bd = b.data();
  float* od = out.data();
  for (int64_t i = 0; i < n; ++i) od[i] = ad[i] * bd[i];
  if (track) {
    autograd::record([a, b, out, n]() mutable {
      const float* dout = out.grad();
      if (a.requires_grad()) {
        float* da = a.grad();
        for (int64_t i = 0; i < n; ++i) da[i] += dout[i] * b.data()[i];
      }
      if (b.requires_grad()) {
        float* db = b.grad();
        for (int64_t i = 0; i < n; ++i) db[i] += dout[i] * a.data()[i];
      }
    });
  }
  return out;
}

// forward: out = s · a        backward: da += s · dout
Tensor scale(const Tensor& a, float s) {
  const int64_t n = a.numel();
  bool track = autograd::needs_grad({&a});
  Tensor out = Tensor::empty(a.shape(), track);
  for (int64_t i = 0; i < n; ++i) out.data()[i] = s * a.data()[i];
  if (track) {
    autograd::record([a, out, s, n]() mutable {
      float* da = a.grad();
      const float* dout = out.grad();
      for (int64_t i = 0; i < n; ++i) da[i] += s * dout[i];
    });
  }
  return out;
}

}  // namespace nn
