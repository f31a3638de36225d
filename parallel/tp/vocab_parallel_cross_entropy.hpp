// Cross-entropy over logits that stay split by vocabulary across the tensor-parallel group
// (Megatron's vocab-parallel loss): rank r holds logits[:, r·Vr : (r+1)·Vr], and the full
// [N, V] logits are never gathered. Three all-reduces of N numbers each replace them:
//
//   1. the maximum of each row         (for a stable softmax)      allreduce max
//   2. the target's logit of each row  (only its owner adds it)    allreduce sum
//   3. the sum of exp(z − max) per row                             allreduce sum
//
//   loss = mean_rows( log Σ_j exp(z_j − max) + max − z_target )
//
// The backward is local: d loss/d z_j = (softmax_j − [j = target]) / n for this rank's j.
// Columns at global index ≥ vocab_size are padding (the vocabulary rounded up to a multiple
// of the group size): they count as −∞ — never predicted, gradient 0.
#pragma once

#include <cstdint>
#include <span>

#include "comm/communicator.hpp"
#include "nn/tensor.hpp"

namespace parallel {

// local_logits [N, Vr] (or [..., Vr]) are columns [vocab_start, vocab_start + Vr) of the full
// logits; targets: N global ids (ignore_index rows skipped). The same loss on every rank.
nn::Tensor vocab_parallel_cross_entropy(const nn::Tensor& local_logits, std::span<const int32_t> targets,
                                        int64_t vocab_start, int64_t vocab_size, comm::Communicator& tp,
                                        int32_t ignore_index = -1);

}  // namespace parallel
