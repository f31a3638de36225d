#include "nn/eigen_gemm_kernel.hpp"

#include <Eigen/Core>

namespace nn {
namespace {

// Row-major views of the caller's memory, compiled for this CPU (-march=native).
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using Map = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename L, typename R>
void multiply_into(Map& c, const L& a, const R& b, float alpha, float beta) {
  if (beta == 0.0f) {
    c.noalias() = alpha * (a * b);
  } else {
    if (beta != 1.0f) c *= beta;
    c.noalias() += alpha * (a * b);
  }
}

}  // namespace

void eigen_gemm_one_thread(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  Map c(C, M, N, Eigen::OuterStride<>(ldc));
  ConstMap a(A, trans_a ? K : M, trans_a ? M : K, Eigen::OuterStride<>(lda));
  ConstMap b(B, trans_b ? N : K, trans_b ? K : N, Eigen::OuterStride<>(ldb));
  if (trans_a && trans_b)
    multiply_into(c, a.transpose(), b.transpose(), alpha, beta);
  else if (trans_a)
    multiply_into(c, a.transpose(), b, alpha, beta);
  else if (trans_b)
    multiply_into(c, a, b.transpose(), alpha, beta);
  else
    multiply_into(c, a, b, alpha, beta);
}

}  // namespace nn
