// The one matrix multiply everything uses (row-major, like the tensors):
//   C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C      op(X) = X or Xᵀ
// A is stored [M,K] (or [K,M] when trans_a) with row stride lda; likewise B and C.
// Runs on OpenBLAS's cblas_sgemm when OpenBLAS picked AVX-512 kernels for this CPU, else on
// Eigen's GEMM (vectorised for this CPU, threaded with OpenMP): chosen at run time, because
// which is faster depends on the kernels OpenBLAS picks (docs/nn.md has the measurements).
// A program may force one (use_gemm_engine: the programs read NANODIST_GEMM=eigen|openblas|onednn
// where they start).
//
// gemm_bf16 is the product of --precision bf16 (nn/autocast.hpp): A and B in bf16, C in fp32,
// on oneDNN's AVX-512 BF16 kernels where the CPU has them, else emulated exactly (the bf16
// inputs widened to fp32 for the fp32 engine: a bf16 product is exact in fp32).
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "numeric/bf16.hpp"

namespace nn {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const numeric::bfloat16* A, int64_t lda,
               const numeric::bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc);

enum class Precision { fp32, bf16 };

// Which engine runs the products: chosen by this machine (automatic), or forced.
enum class GemmEngine { automatic, eigen, openblas, onednn };
inline constexpr std::array<std::string_view, 4> kGemmEngineNames = {"auto", "eigen", "openblas", "onednn"};
// The engine NANODIST_GEMM's text names (null or unset: automatic); throws nn::Error naming
// the text and the choices otherwise.
GemmEngine parse_gemm_engine(const char* text);
// The engine of the rest of the process, given by the program where it starts (before any
// product; without it, automatic). Throws nn::Error for onednn in a build without oneDNN, or
// when the products already run on another engine.
void use_gemm_engine(GemmEngine engine);

// Whether bf16 products run on bf16 hardware here (oneDNN on AVX-512 BF16), not emulated.
bool gemm_has_native_bf16();

// Which engine runs a precision: "OpenBLAS (SkylakeX kernels)", "oneDNN (AVX-512 BF16 kernels)", …
const char* gemm_library(Precision precision = Precision::fp32);

}  // namespace nn
