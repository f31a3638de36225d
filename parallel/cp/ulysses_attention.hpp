// Ulysses (DeepSpeed, Jacobs et al. 2023): attention under context parallelism by two
// all-to-alls. Each rank holds S = T/c positions of every head; attention needs every position
// of a head, and the heads are independent. So an all-to-all trades the shard: afterwards each
// rank holds all T positions of H/c heads, runs ordinary causal attention on them, and a second
// all-to-all trades back.
//
//   qkv [B, S, 3C]   this rank's positions, every head
//     ─ all-to-all ─▶ [B, T, 3C/c]   every position, heads r·H/c … (r+1)·H/c − 1
//     ─ causal attention (nn::attention, the same kernel as one rank's) ─▶ [B, T, C/c]
//     ─ all-to-all ─▶ y [B, S, C]    this rank's positions, every head
//
// Backward is the same path reversed: the gradients go through the two all-to-alls the other
// way. Each head is computed whole, as on one rank, with its dropout mask at its place in the
// whole [H,T,T] weights: the result is one rank's, bit for bit. Per layer and rank, forward
// moves 3·B·S·C elements in (q, k, v) and B·S·C out (y), backward as much again, (c−1)/c of
// each leaving the rank: for a fixed S per rank the bytes do not grow with c, which is why it
// scales within a node. It needs the heads divisible by c (refused otherwise).
#pragma once
#include "comm/communicator.hpp"
#include "nn/dropout_mask.hpp"
#include "nn/ops.hpp"
#include "nn/tensor.hpp"
#include "parallel/cp/context_shard.hpp"

namespace parallel {

// x [B, S, G·C] (this rank's positions of G groups of C columns, each group's columns every
// head's) → [B, T, G·C/c]: every position, in order, of this rank's share of each group's
// columns. Backward: the way back (heads_to_sequence).
nn::Tensor sequence_to_heads(const nn::Tensor& x, int groups, const ContextShard& shard, comm::Communicator& cp);
// The inverse: y [B, T, G·C/c] → [B, S, G·C].
nn::Tensor heads_to_sequence(const nn::Tensor& y, int groups, const ContextShard& shard, comm::Communicator& cp);

// qkv [B, S, 3C] of n_head heads (q | k | v) → y [B, S, C]. `dropout`: the mask of these heads'
// weights as whole attention would use it (its first element at the first of them).
nn::Tensor ulysses_attention(const nn::Tensor& qkv, int n_head, const nn::DropoutMask& dropout,
                             nn::AttentionKernel kernel, nn::Precision precision, const ContextShard& shard,
                             comm::Communicator& cp);

}  // namespace parallel
