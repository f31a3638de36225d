// Matrix multiply and nn.Linear — where nearly all of a transformer's FLOPs are.
#include <Eigen/Core>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/gemm.hpp"
#include "nn/ops.hpp"

namespace nn {

// forward:  c[M,N] = a[M,K] · b[K,N]
// backward: da[M,K] += dc · bᵀ      db[K,N] += aᵀ · dc
Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.ndim() != 2 || b.ndim() != 2 || a.size(1) != b.size(0))
    fail("matmul: shapes {} and {} do not fit", shape_string(a.shape()), shape_string(b.shape()));
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  bool track = autograd::needs_grad({&a, &b});
  Tensor c = Tensor::empty({M, N}, track);
  gemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
  if (track) {
    autograd::record([a, b, c, M, N, K]() mutable {
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
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const int64_t in = x.size(-1);
  if (weight.ndim() != 2 || weight.size(1) != in)
    fail("linear: input {} does not fit weight {}", shape_string(x.shape()), shape_string(weight.shape()));
  const int64_t out = weight.size(0), rows = x.numel() / in;
  if (bias.defined() && (bias.ndim() != 1 || bias.size(0) != out))
    fail("linear: bias {} does not fit weight {}", shape_string(bias.shape()), shape_string(weight.shape()));

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
  gemm(false, true, rows, out, in, 1.0f, x.data(), in, weight.data(), in, bias.defined() ? 1.0f : 0.0f, y.data(), out);

  if (track) {
    autograd::record([x, weight, bias, y, rows, in, out]() mutable {
      const float* dy = y.grad();
      if (x.requires_grad()) {
        auto dx = x.grad_target();
        gemm(false, false, rows, in, out, 1.0f, dy, out, weight.data(), in, dx.accumulate ? 1.0f : 0.0f, dx.data, in);
      }
      if (weight.requires_grad())
        gemm(true, false, out, in, rows, 1.0f, dy, out, x.data(), in, 1.0f, weight.grad(), in);
      if (bias.defined() && bias.requires_grad()) {
        using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
        Eigen::Map<const RowMajor> dy_matrix(dy, rows, out);
        Eigen::Map<Eigen::RowVectorXf> db(bias.grad(), out);
        db += dy_matrix.colwise().sum();
      }
    });
  }
  return y;
}

}  // namespace nn
