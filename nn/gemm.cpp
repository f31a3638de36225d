#include "nn/gemm.hpp"

#include <algorithm>

#ifdef NANODIST_GEMM_OPENBLAS
#include <cblas.h>
#else
#include <Eigen/Core>
#endif
#include <omp.h>

namespace nn {

#ifdef NANODIST_GEMM_OPENBLAS

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}

const char* gemm_library() { return "OpenBLAS"; }

#else

namespace {
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

// One thread's share: Eigen's GEMM, single-threaded (EIGEN_DONT_PARALLELIZE).
void gemm_one_thread(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  Map c(C, M, N, Eigen::OuterStride<>(ldc));
  ConstMap a(A, trans_a ? K : M, trans_a ? M : K, Eigen::OuterStride<>(lda));
  ConstMap b(B, trans_b ? N : K, trans_b ? K : N, Eigen::OuterStride<>(ldb));
  if (trans_a && trans_b) multiply_into(c, a.transpose(), b.transpose(), alpha, beta);
  else if (trans_a) multiply_into(c, a.transpose(), b, alpha, beta);
  else if (trans_b) multiply_into(c, a, b.transpose(), alpha, beta);
  else multiply_into(c, a, b, alpha, beta);
}

// Threads split C into bands of rows (or, when C is wide and short, of columns); each band is
// an independent GEMM. One parallel region per call, no synchronisation inside it — this
// scales better on small matrices than Eigen's own threading. Inside an already parallel
// loop (attention's per-head products) it runs on the calling thread only.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads == 1 || M * N * K < 32 * 32 * 32) {
    gemm_one_thread(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool split_rows = M >= N || M >= 64 * threads;
  const int64_t extent = split_rows ? M : N;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    // Band boundaries rounded to multiples of 16 (whole vector registers).
    auto edge = [&](int i) { return std::min(extent, (extent * i / n + 15) / 16 * 16); };
    const int64_t begin = t == 0 ? 0 : edge(t), end = t == n - 1 ? extent : edge(t + 1);
    if (end > begin) {
      if (split_rows) {
        const float* a_band = trans_a ? A + begin : A + begin * lda;
        gemm_one_thread(trans_a, trans_b, end - begin, N, K, alpha, a_band, lda, B, ldb, beta, C + begin * ldc, ldc);
      } else {
        const float* b_band = trans_b ? B + begin * ldb : B + begin;
        gemm_one_thread(trans_a, trans_b, M, end - begin, K, alpha, A, lda, b_band, ldb, beta, C + begin, ldc);
      }
    }
  }
}

const char* gemm_library() { return "Eigen"; }

#endif

}  // namespace nn
