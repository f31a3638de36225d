#include "nn/gemm.hpp"

#include <algorithm>
#include <atomic>

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "numeric/bf16.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/eigen_gemm_kernel.hpp"
#include "nn/error.hpp"
#include "nn/onednn_gemm.hpp"

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

// ---- bf16 without bf16 units: emulated -------------------------------------------------
//
// A bf16 × bf16 product is exact in fp32 (8 + 8 significant bits fit in 24), so widening the
// bf16 inputs to fp32 and running the fp32 GEMM computes what a bf16 unit computes — the
// same products, summed in fp32 — only in another order and without the speed. Where the
// CPU or the build has no bf16 GEMM, --precision bf16 runs this way (and says so).

using GemmFunction = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                              int64_t, float, float*, int64_t);
using Bf16GemmFunction = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const numeric::bfloat16*, int64_t,
                                  const numeric::bfloat16*, int64_t, float, float*, int64_t);

struct Choice {
  GemmEngine engine;  // what was asked for
  GemmFunction fp32;
  std::string fp32_description;
  Bf16GemmFunction bf16 = nullptr;  // null: emulated on fp32
  std::string bf16_description;
};
const Choice& chosen();

// A matrix of `rows` rows of `cols` values `ld` apart, widened into a buffer laid out the same
// way: from the buffer pool, or — inside a parallel loop (attention's per-head products), where
// the pool's owner thread is not the caller — from this thread's own scratch (`slot` 0 or 1).
struct Widened {
  Widened(const numeric::bfloat16* bf16, int64_t rows, int64_t cols, int64_t ld, int slot)
      : count(rows == 0 || cols == 0 ? 0 : static_cast<std::size_t>((rows - 1) * ld + cols)),
        pooled(!omp_in_parallel()) {
    thread_local std::vector<float> scratch[2];
    if (pooled) {
      values = BufferPool::acquire(count);
    } else {
      if (scratch[slot].size() < count) scratch[slot].resize(count);
      values = scratch[slot].data();
    }
    numeric::widen_to_float({bf16, count}, {values, count});
  }
  ~Widened() {
    if (pooled) BufferPool::release(values, count);
  }
  std::size_t count;
  bool pooled;
  float* values;
};

void emulated_gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const numeric::bfloat16* A,
                        int64_t lda, const numeric::bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const Widened a(A, trans_a ? K : M, trans_a ? M : K, lda, 0), b(B, trans_b ? N : K, trans_b ? K : N, ldb, 1);
  chosen().fp32(trans_a, trans_b, M, N, K, alpha, a.values, lda, b.values, ldb, beta, C, ldc);
}

// ---- the choice, made once per precision -----------------------------------------------
//
// Measured (docs/nn.md): OpenBLAS with its AVX-512 kernels is the fastest fp32 engine of the
// three here, but held to AVX2 kernels (OPENBLAS_CORETYPE=Haswell, which these machines set)
// it is the slowest (1.2× slower than Eigen). oneDNN's fp32 matmul with its AVX-512 kernels
// beats both (main job 13.8 ms/step against Eigen's 17.3; preset b 2.97 s against OpenBLAS's
// 3.15 s with AVX-512 kernels), so it comes first where the build has it and the CPU has
// AVX-512. For bf16: oneDNN's AVX-512 BF16 kernels when the CPU has them, else emulation.
// A program may override the choice (use_gemm_engine; the trainers and gpt_bench read
// NANODIST_GEMM=eigen|openblas|onednn where they start; eigen and openblas run bf16 emulated).

bool has_avx512_kernels(std::string core) {
  std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* name : {"skylakex", "cooperlake", "sapphirerapids"})
    if (core.find(name) != std::string::npos) return true;
  return false;
}

Choice with_bf16(GemmEngine engine, GemmFunction fp32, std::string fp32_description, const std::string& fp32_name) {
  Choice c{engine, fp32, std::move(fp32_description)};
  if (onednn_available() && onednn_has_bf16_units()) {
    c.bf16 = onednn_gemm_bf16;
    c.bf16_description = "oneDNN (AVX-512 BF16 kernels)";
  } else {
    c.bf16_description = fmt::format("{}, emulated: bf16 inputs widened to fp32 ({})", fp32_name,
                                     onednn_available() ? "this CPU has no AVX-512 BF16" : "this build has no oneDNN");
  }
  return c;
}

Choice choose(GemmEngine want) {
  const std::string core = openblas_get_corename() ? openblas_get_corename() : "unknown";
  switch (want) {
    case GemmEngine::openblas: {
      Choice c{want, openblas_gemm, fmt::format("OpenBLAS ({} kernels, NANODIST_GEMM=openblas)", core)};
      c.bf16_description = "OpenBLAS, emulated: bf16 inputs widened to fp32 (NANODIST_GEMM=openblas)";
      return c;
    }
    case GemmEngine::eigen: {
      Choice c{want, eigen_gemm, "Eigen (NANODIST_GEMM=eigen)"};
      c.bf16_description = "Eigen, emulated: bf16 inputs widened to fp32 (NANODIST_GEMM=eigen)";
      return c;
    }
    case GemmEngine::onednn:
      if (!onednn_available()) fail("NANODIST_GEMM=onednn: this build has no oneDNN (install libdnnl-dev, build again)");
      return with_bf16(want, onednn_gemm_f32, "oneDNN (NANODIST_GEMM=onednn)", "oneDNN");
    case GemmEngine::automatic:
      break;
  }
  if (onednn_available() && onednn_has_avx512())
    return with_bf16(want, onednn_gemm_f32, "oneDNN (AVX-512 kernels)", "oneDNN");
  if (has_avx512_kernels(core))
    return with_bf16(want, openblas_gemm, fmt::format("OpenBLAS ({} kernels)", core), "OpenBLAS");
  return with_bf16(want, eigen_gemm, fmt::format("Eigen (OpenBLAS would use {} kernels, slower here)", core), "Eigen");
}

// What the program asked for (use_gemm_engine), read when the first product fixes the choice
// (atomic: a product on another thread may be the first).
std::atomic<GemmEngine> requested_engine{GemmEngine::automatic};

const Choice& chosen() {
  static const Choice choice = choose(requested_engine.load());
  return choice;
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_span(A, trans_a ? K : M, trans_a ? M : K, lda);
  check_span(B, trans_b ? N : K, trans_b ? K : N, ldb);
  check_span(C, M, N, ldc);
  chosen().fp32(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const numeric::bfloat16* A, int64_t lda,
               const numeric::bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_span(C, M, N, ldc);
  const Choice& c = chosen();
  if (c.bf16)
    c.bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    emulated_gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

GemmEngine parse_gemm_engine(const char* text) {
  const std::string_view want = text ? text : "auto";
  for (std::size_t i = 0; i < kGemmEngineNames.size(); ++i)
    if (want == kGemmEngineNames[i]) return static_cast<GemmEngine>(i);
  fail("NANODIST_GEMM={}: expected eigen, openblas, onednn or auto", want);
}

void use_gemm_engine(GemmEngine engine) {
  requested_engine.store(engine);
  const GemmEngine running = chosen().engine;  // fixed now, if it was not yet
  if (running != engine)
    fail("the GEMM engine is already {}: choose {} before the first product", kGemmEngineNames[static_cast<int>(running)],
         kGemmEngineNames[static_cast<int>(engine)]);
}

bool gemm_has_native_bf16() { return chosen().bf16 != nullptr; }

const char* gemm_library(Precision precision) {
  return precision == Precision::bf16 ? chosen().bf16_description.c_str() : chosen().fp32_description.c_str();
}

}  // namespace nn
