// The one matrix multiply everything uses (row-major, like the tensors):
//   C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C      op(X) = X or Xᵀ
// A is stored [M,K] (or [K,M] when trans_a) with row stride lda; likewise B and C.
// Runs on OpenBLAS's cblas_sgemm when OpenBLAS picked AVX-512 kernels for this CPU, else on
// Eigen's GEMM (vectorised for this CPU, threaded with OpenMP): chosen at run time, because
// which is faster depends on the kernels OpenBLAS picks (docs/nn.md has the measurements).
// NANODIST_GEMM=eigen|openblas forces one.
#pragma once
#include <cstdint>

namespace nn {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

const char* gemm_library();  // "OpenBLAS (SkylakeX kernels)", "Eigen (OpenBLAS would use Haswell kernels, …)"

}  // namespace nn
