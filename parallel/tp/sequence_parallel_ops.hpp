// Sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models"): outside the tensor-parallel regions — layernorms, dropout, the
// residual stream — every tp rank used to hold the whole [B,T,C] activation and do the same
// work. With sequence parallelism rank r holds only its T/tp positions [B, T/tp, C] there, and
// the all-reduce g becomes a reduce-scatter, the identity f an all-gather:
//
//   [B,T/tp,C] ─ layernorm ─ all-gather ─▶ [B,T,C] ─ column-parallel … row-parallel ─▶ partial [B,T,C]
//                                                                                ─ reduce-scatter ─▶ [B,T/tp,C]
//
// An all-reduce is a reduce-scatter followed by an all-gather, so the bytes moved are the same;
// what is saved is the activation memory (and the work) of the replicated regions, / tp.
//
// Our activations are [B,T,C] row-major, so positions [r·T/tp, (r+1)·T/tp) of every sequence
// are not contiguous: the ops reorder [B, tp, T/tp, C] ↔ [tp, B, T/tp, C] around the collective
// (whose blocks are contiguous: block r to/from rank r).
#pragma once
#include "comm/communicator.hpp"
#include "nn/tensor.hpp"

namespace parallel {

// x [B, T/tp, C], this rank's positions → [B, T, C], the whole sequence on every rank.
// Backward: the whole gradient's rows of this rank's positions, summed over tp (a reduce-scatter).
nn::Tensor gather_from_sequence_parallel(const nn::Tensor& x, comm::Communicator& tp);

// x [B, T, C], this rank's partial sum → [B, T/tp, C]: the sum over tp of this rank's positions.
// Backward: the gradients of every rank's positions, gathered (an all-gather).
nn::Tensor reduce_scatter_to_sequence_parallel(const nn::Tensor& x, comm::Communicator& tp);

}  // namespace parallel
