// Matrix multiply and nn.Linear — where nearly all of a transformer's FLOPs are. Under
// --precision bf16 (nn/autocast.hpp) both run their products in bf16: the inputs are cast
// (a parameter once per step, through the cast cache), the products return fp32, and the
// casts forward made are kept for backward, as autocast saves them.
#include "nn/autocast.hpp"
#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/gemm.hpp"
#include "nn/ops.hpp"
#include "nn/ops/row_sums.hpp"
#include "nn/profile.hpp"

namespace nn {

// matmul in bf16: c = bf16(a) · bf16(b), and in backward da = bf16(dc) · bf16(b)ᵀ, db = bf16(a)ᵀ · bf16(dc).
static Tensor matmul_bf16(const Tensor& a, const Tensor& b, Tensor& c, bool track) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  Bf16Values a16 = cast_to_bf16(a.data(), M * K), b16 = cast_to_bf16(b.data(), K * N);
  gemm_bf16(false, false, M, N, K, 1.0f, a16->data(), K, b16->data(), N, 0.0f, c.data(), N);
  if (track) {
    autograd::record([a, b, c, M, N, K, a16, b16]() mutable {
      profile::Scope backward_scope("GEMM matmul", 0, 2.0 * M * N * K * (a.requires_grad() + b.requires_grad()));
      Bf16Values dc16 = cast_to_bf16(c.grad(), M * N);
      if (a.requires_grad()) {
        auto da = a.grad_target();
        gemm_bf16(false, true, M, K, N, 1.0f, dc16->data(), N, b16->data(), N, da.accumulate ? 1.0f : 0.0f, da.data, K);
      }
      if (b.requires_grad()) {
        auto db = b.grad_target();
        gemm_bf16(true, false, K, N, M, 1.0f, a16->data(), K, dc16->data(), N, db.accumulate ? 1.0f : 0.0f, db.data, N);
      }
    });
  }
  return c;
}

// forward:  c[M,N] = a[M,K] · b[K,N]
// backward: da[M,K] += dc · bᵀ      db[K,N] += aᵀ · dc
Tensor matmul(const Tensor& a, const Tensor& b, Precision precision) {
  if (a.ndim() != 2 || b.ndim() != 2 || a.size(1) != b.size(0))
    fail("matmul: shapes {} and {} do not fit", shape_string(a.shape()), shape_string(b.shape()));
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  profile::Scope scope("GEMM matmul", 0, 2.0 * M * N * K);
  bool track = autograd::needs_grad({&a, &b});
  Tensor c = Tensor::empty({M, N}, track);
  if (precision == Precision::bf16) return matmul_bf16(a, b, c, track);
  gemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
  if (track) {
    autograd::record([a, b, c, M, N, K]() mutable {
      profile::Scope backward_scope("GEMM matmul", 0, 2.0 * M * N * K * (a.requires_grad() + b.requires_grad()));
      if (a.requires_grad()) {
        auto da = a.grad_target();
        gemm(false, true, M, K, N, 1.0f, c.grad(), N, b.data(), N, da.accumulate ? 1.0f : 0.0f, da.data, K);
      }
      if (b.requires_grad()) {
        auto db = b.grad_target();
        gemm(true, false, K, N, M, 1.0f, a.data(), K, c.grad(), N, db.accumulate ? 1.0f : 0.0f, db.data, N);
      }
    });
  }
  return c;
}

// forward:  y[R,out] = x[R,in] · Wᵀ + bias        (R = all leading dimensions of x)
// backward: dx[R,in] += dy · W      dW[out,in] += dyᵀ · x      dbias[out] += Σ_rows dy
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family, Precision precision) {
  const int64_t in = x.size(-1);
  if (weight.ndim() != 2 || weight.size(1) != in)
    fail("linear: input {} does not fit weight {}", shape_string(x.shape()), shape_string(weight.shape()));
  const int64_t out = weight.size(0), rows = x.rows_of_last("linear");
  if (bias.defined() && (bias.ndim() != 1 || bias.size(0) != out))
    fail("linear: bias {} does not fit weight {}", shape_string(bias.shape()), shape_string(weight.shape()));
  profile::Scope scope(family, 0, 2.0 * rows * in * out);

  Shape y_shape = x.shape();
  y_shape.back() = out;
  bool track = autograd::needs_grad({&x, &weight, &bias});
  Tensor y = Tensor::empty(y_shape, track);
  if (bias.defined()) {  // start from the bias in every row, then add x·Wᵀ on top
    float* yd = y.data();
    const float* bd = bias.data();
#pragma omp parallel for schedule(static) if (rows * out > 65536)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) yd[r * out + o] = bd[o];
  }
  const float beta = bias.defined() ? 1.0f : 0.0f;
  if (precision == Precision::bf16) {
    // The same products on bf16 inputs; forward's casts of x and W serve backward too.
    Bf16Values x16 = cast_to_bf16(x.data(), rows * in), w16 = cast_weight_to_bf16(weight);
    gemm_bf16(false, true, rows, out, in, 1.0f, x16->data(), in, w16->data(), in, beta, y.data(), out);
    if (track)
      autograd::record([x, weight, bias, y, rows, in, out, x16, w16, family]() mutable {
        profile::Scope backward_scope(family, 0, 2.0 * rows * in * out * (x.requires_grad() + weight.requires_grad()));
        Bf16Values dy16 = cast_to_bf16(y.grad(), rows * out);
        if (x.requires_grad()) {
          auto dx = x.grad_target();
          gemm_bf16(false, false, rows, in, out, 1.0f, dy16->data(), out, w16->data(), in, dx.accumulate ? 1.0f : 0.0f,
                    dx.data, in);
        }
        if (weight.requires_grad())
          gemm_bf16(true, false, out, in, rows, 1.0f, dy16->data(), out, x16->data(), in, 1.0f, weight.grad(), in);
        if (bias.defined() && bias.requires_grad()) add_row_sums(y.grad(), rows, out, bias.grad());
      });
    return y;
  }
  gemm(false, true, rows, out, in, 1.0f, x.data(), in, weight.data(), in, beta, y.data(), out);

  if (track) {
    autograd::record([x, weight, bias, y, rows, in, out, family]() mutable {
      profile::Scope backward_scope(family, 0, 2.0 * rows * in * out * (x.requires_grad() + weight.requires_grad()));
      const float* dy = y.grad();
      if (x.requires_grad()) {
        auto dx = x.grad_target();
        gemm(false, false, rows, in, out, 1.0f, dy, out, weight.data(), in, dx.accumulate ? 1.0f : 0.0f, dx.data, in);
      }
      if (weight.requires_grad())
        gemm(true, false, out, in, rows, 1.0f, dy, out, x.data(), in, 1.0f, weight.grad(), in);
      if (bias.defined() && bias.requires_grad()) add_row_sums(dy, rows, out, bias.grad());
    });
  }
  return y;
}

}  // namespace nn
