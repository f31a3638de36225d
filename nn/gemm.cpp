#include "nn/gemm.hpp"

#include <algorithm>

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "nn/eigen_gemm_kernel.hpp"
#include "nn/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

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

// ---- Eigen: compiled for this CPU (-march=native), threaded by bands below -------------

// A matrix of `rows` rows of `cols` floats, `stride` apart, must lie in live memory. In the
// sanitizer build AddressSanitizer checks the whole span, because the GEMM kernels run
// uninstrumented there (OpenBLAS always, Eigen's by choice: nn/eigen_gemm_kernel.hpp);
// a poisoned byte is read here, which is ASan's usual report. Elsewhere this does nothing.
void check_span([[maybe_unused]] const float* first, [[maybe_unused]] int64_t rows, [[maybe_unused]] int64_t cols,
                [[maybe_unused]] int64_t stride) {
#if defined(__SANITIZE_ADDRESS__)
  if (rows == 0 || cols == 0) return;
  const std::size_t bytes = static_cast<std::size_t>((rows - 1) * stride + cols) * sizeof(float);
  if (const void* bad = __asan_region_is_poisoned(const_cast<float*>(first), bytes)) {
    fmt::print(stderr, "gemm: a {}×{} matrix (row stride {}) reaches outside live memory\n", rows, cols, stride);
    [[maybe_unused]] const char byte = *static_cast<const volatile char*>(bad);
  }
#endif
}

// One band: its operands checked, then Eigen's single-threaded kernel.
void gemm_one_thread(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  check_span(A, trans_a ? K : M, trans_a ? M : K, lda);
  check_span(B, trans_b ? N : K, trans_b ? K : N, ldb);
  check_span(C, M, N, ldc);
  eigen_gemm_one_thread(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
  check_span(A, trans_a ? K : M, trans_a ? M : K, lda);
  check_span(B, trans_b ? N : K, trans_b ? K : N, ldb);
  check_span(C, M, N, ldc);
  chosen().function(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

const char* gemm_library() { return chosen().description.c_str(); }

}  // namespace nn
