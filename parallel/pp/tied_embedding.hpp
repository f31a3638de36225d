// The tied embedding across a pipeline. wte is used twice: by the embedding on the first
// stage and, as lm_head, by the head on the last. Each of the two stages keeps its own copy;
// after backward each copy holds only its own use's gradient, so the two are summed (one
// exchange between the first and the last stage, Megatron's "embedding group") and both
// copies take the same optimizer step from the same sum — they stay identical, bit for bit.
#pragma once
#include "comm/communicator.hpp"
#include "nn/gpt.hpp"

namespace parallel {

// First and last stage: wte.grad ← wte.grad(first) + wte.grad(last). Other stages, and a
// pipeline of one stage (one copy, already both uses), do nothing.
void sum_tied_embedding_grads(nn::GPT& model, comm::Communicator& pp_group);

// Check mode: the two copies must be bit-identical; throws naming the stages otherwise.
void verify_tied_embedding(nn::GPT& model, comm::Communicator& pp_group);

// The same for any stage's copy (train_3d: this tp rank's wte rows, summed with the same rows
// on the other end of its pipeline).
void sum_tied_embedding_grads(const nn::Tensor& wte, comm::Communicator& pp_group);
void verify_tied_embedding(const nn::Tensor& wte, comm::Communicator& pp_group);

}  // namespace parallel
