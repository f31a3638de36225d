// Column- and row-parallel linear layers (Megatron), and how a full nn.Linear weight
// [out, in] is cut for them. T = the tensor-parallel group's size, r = this rank.
//
//   column-parallel  Y_r = f(X) · W_rᵀ + b_r    W_r = rows [r·out/T, (r+1)·out/T) of W   → Y split by columns
//   row-parallel     Y   = g(X_r · W_rᵀ) + b    W_r = columns [r·in/T, (r+1)·in/T) of W  → Y whole
//
//        X ──f──> [X·W_0ᵀ | X·W_1ᵀ]  (each rank its columns)  ──> [X_0 | X_1]·[W_0 | W_1]ᵀ ──g──> Y
//
// A column-parallel layer followed by a row-parallel one (attention's c_attn → c_proj, the
// MLP's c_fc → c_proj) needs no communication in between: the activation stays split.
// The row-parallel bias is added once, after the reduction (on every rank, the same b).
#pragma once

#include "comm/communicator.hpp"
#include "nn/gemm.hpp"  // Precision
#include "nn/tensor.hpp"

namespace parallel {

// x [..., in] (whole on every rank) → [..., out/T] (this rank's output columns). `precision`:
// the product's (nn::linear's).
// `family`: the GEMM's name in the profile ("GEMM attn.c_attn").
nn::Tensor column_parallel_linear(const nn::Tensor& x, const nn::Tensor& weight_rows, const nn::Tensor& bias_rows,
                                  comm::Communicator& tp, nn::Precision precision = nn::Precision::fp32,
                                  const char* family = "GEMM linear");
// x [..., in/T] (this rank's input columns) → [..., out] (whole, the same on every rank).
nn::Tensor row_parallel_linear(const nn::Tensor& x, const nn::Tensor& weight_columns, const nn::Tensor& bias,
                               comm::Communicator& tp, nn::Precision precision = nn::Precision::fp32,
                               const char* family = "GEMM linear");

// sum + bias, for a bias added once after the ranks' partial products are summed; sum is a
// reduce's fresh result (linear's own output on one rank) that nothing else reads. Neither
// the reduce's backward nor the add's reads its values, yet their closures hold it: its
// values go back to the pool at once (C floats a token that would otherwise stay until backward).
nn::Tensor add_bias_to_sum(nn::Tensor sum, const nn::Tensor& bias);

// Cutting full parameters (values or gradients) into this rank's shard:
// rows [r·n/T, (r+1)·n/T) of a [n, ...] tensor — done within each of `pieces` equal parts
// (c_attn is q | k | v stacked: each is cut by whole heads, so pieces = 3).
std::vector<float> row_slice(std::span<const float> full, int64_t rows, int64_t columns, int rank, int T,
                             int pieces = 1);
// columns [r·n/T, (r+1)·n/T) of a [rows, n] tensor.
std::vector<float> column_slice(std::span<const float> full, int64_t rows, int64_t columns, int rank, int T);

}  // namespace parallel
