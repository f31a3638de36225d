// One thread's matrix multiply on Eigen's GEMM (single-threaded: EIGEN_DONT_PARALLELIZE), with
// nn::gemm's arguments: C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C, row-major.
// nn/gemm.cpp splits a product into bands and calls this once per band.
//
// In the sanitizer build this file alone is compiled without instrumentation: it is Eigen's
// inner loop, where ASan + UBSan cost 10× (a 2-rank training step 650 ms → 57 ms), much like
// OpenBLAS, which is never instrumented. nn/gemm.cpp checks, instrumented, that each band's
// A, B and C lie inside live memory before it calls this.
#pragma once
#include <cstdint>

namespace nn {

void eigen_gemm_one_thread(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace nn
