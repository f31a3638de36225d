#include "nn/gemm.hpp"

#include <algorithm>

#include <cblas.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "nn/error.hpp"

extern "C" char* openblas_get_corename(void);

namespace nn {
namespace {

// ---- OpenBLAS: its own kernels for the CPU it detects, threaded by itself ----------------

void openblas_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, C, ldc);
}

// ---- Eigen: compiled for this CPU (-march=native), threaded by row bands below ----------

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

// One thread's share: Eigen's GEMM, single-threaded (EIGEN_DONT_PARALLELIZE).
void gemm_one_thread(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
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

// Threads split C into bands of rows (or, when C is wide and short, of columns); each band is
// an independent GEMM. One parallel region per call, no synchronisation inside it — this
// scales better on small matrices than Eigen's own threading. Inside an already parallel
// loop (attention's per-head products) it runs on the calling thread only.
void eigen_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
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

// ---- the choice, made once -------------------------------------------------------------
//
// Measured (docs/nn.md): OpenBLAS with its AVX-512 kernels is the fastest here (preset b
// 1.4× Eigen), but held to AVX2 kernels (OPENBLAS_CORETYPE=Haswell, which these machines
// set) it is the slowest (1.2× slower than Eigen). Eigen's speed does not depend on the
// variable. So: OpenBLAS when it picked AVX-512 kernels, Eigen otherwise. NANODIST_GEMM=
// eigen|openblas overrides the choice.

using GemmFunction = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                              int64_t, float, float*, int64_t);

bool has_avx512_kernels(std::string core) {
  std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* name : {"skylakex", "cooperlake", "sapphirerapids"})
    if (core.find(name) != std::string::npos) return true;
  return false;
}

struct Choice {
  GemmFunction function;
  std::string description;
};

Choice choose() {
  const std::string core = openblas_get_corename() ? openblas_get_corename() : "unknown";
  const char* forced = std::getenv("NANODIST_GEMM");
  const std::string want = forced ? forced : "auto";
  if (want == "openblas") return {openblas_gemm, fmt::format("OpenBLAS ({} kernels, NANODIST_GEMM=openblas)", core)};
  if (want == "eigen") return {eigen_gemm, "Eigen (NANODIST_GEMM=eigen)"};
  if (want != "auto") fail("NANODIST_GEMM={}: expected eigen, openblas or auto", want);
  if (has_avx512_kernels(core)) return {openblas_gemm, fmt::format("OpenBLAS ({} kernels)", core)};
  return {eigen_gemm, fmt::format("Eigen (OpenBLAS would use {} kernels, slower here)", core)};
}

const Choice& chosen() {
  static const Choice choice = choose();
  return choice;
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  chosen().function(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

const char* gemm_library() { return chosen().description.c_str(); }

}  // namespace nn
