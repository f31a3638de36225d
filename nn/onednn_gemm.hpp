// nn::gemm's product on oneDNN's matmul primitive — the library PyTorch runs on CPUs —
// in fp32, and in bf16: inputs in bf16, products and sums in fp32 (AVX-512 BF16's
// vdpbf16ps: two bf16 multiply-adds per fp32 lane, twice fp32's rate), result in fp32.
//
// A primitive is made once per shape (M, N, K, transposes, strides, alpha, beta) and kept:
// making one costs tens of microseconds, running a small one a few. At most 1024 are kept in
// the shared cache and 1024 bound on each thread (onednn_gemm.cpp says why). Present when the build
// found oneDNN (libdnnl-dev); onednn_available() says so at run time.
#pragma once
#include <cstddef>
#include <cstdint>

#include "numeric/bf16.hpp"

namespace nn {

bool onednn_available();
bool onednn_has_avx512();      // oneDNN's dispatcher picks AVX-512 kernels on this CPU
bool onednn_has_bf16_units();  // … and AVX-512 BF16 ones
std::size_t onednn_cached_products();               // in the shared cache
std::size_t onednn_bound_products_on_this_thread();  // bound to the calling thread's memory objects

// C[M,N] = alpha · op(A) · op(B) + beta · C, row-major, as nn::gemm.
void onednn_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// The same with A and B in bf16 (numeric/bf16.hpp), C in fp32.
void onednn_gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const numeric::bfloat16* A,
                      int64_t lda, const numeric::bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace nn
