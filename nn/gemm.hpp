// The one matrix multiply everything uses (row-major, like the tensors):
//   C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C      op(X) = X or Xᵀ
// A is stored [M,K] (or [K,M] when trans_a) with row stride lda; likewise B and C.
// Built on Eigen's GEMM (vectorised for this CPU, threaded with OpenMP) or, with the CMake
// option NANODIST_GEMM_OPENBLAS, on OpenBLAS's cblas_sgemm. docs/nn.md has the measurement
// that chose the default.
#pragma once
#include <cstdint>

namespace nn {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

const char* gemm_library();  // "Eigen" or "OpenBLAS"

}  // namespace nn
