// The token embedding split by vocabulary (Megatron): rank r holds rows
// [r·Vr, (r+1)·Vr) of wte (V padded up to T·Vr). Each rank looks up the ids it owns and
// writes zeros for the others; g (an all-reduce) then sums the T partial lookups, in which
// exactly one rank contributed each row.
//
//   ids ──> rank 0: [e(3), 0,    e(1)]  ─┐
//           rank 1: [0,    e(9), 0   ]  ─┴─ g (sum) ─> [e(3), e(9), e(1)]     (V = 12, T = 2, Vr = 6)
//
// Backward: each rank adds the (whole, replicated) output gradient into the rows it owns.
#pragma once

#include <cstdint>
#include <span>

#include "comm/communicator.hpp"
#include "nn/tensor.hpp"

namespace parallel {

// This rank's partial lookup (zeros for the ids it does not own), before any communication;
// sequence parallelism reduce-scatters it instead of all-reducing it.
nn::Tensor vocab_parallel_lookup(const nn::Tensor& wte_rows, int64_t vocab_start, std::span<const int32_t> ids,
                                 const nn::Shape& ids_shape);

// wte_rows [Vr, C] = rows [vocab_start, vocab_start + Vr) → x [ids_shape..., C], the same on every rank.
nn::Tensor vocab_parallel_embedding(const nn::Tensor& wte_rows, int64_t vocab_start, std::span<const int32_t> ids,
                                    const nn::Shape& ids_shape, comm::Communicator& tp);

}  // namespace parallel
