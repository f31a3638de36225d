// Forward-only passes through a pipeline, for evaluation and samples: each stage holds its part
// of the one nn::GPT (whole or tensor-parallel blocks); stage 0 embeds, each
// stage runs its blocks and sends the activation on, the last stage computes the answer and
// shares it with the whole pipeline — so every rank returns the same value.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/rng.hpp"
#include "nn/gpt.hpp"

namespace parallel {

// The mean cross-entropy of a batch (ids, targets [B,T]); call inside trainers::EvalMode.
float pipeline_loss(nn::GPT& stage_model, comm::Communicator& pp, std::span<const int32_t> ids,
                    std::span<const int32_t> targets, int64_t B, int64_t T);

// GPT::generate through the pipeline: the last stage samples each token and sends it to all
// (with tensor parallelism, every rank of the last stage draws the same token from the same rng).
std::vector<int32_t> pipeline_generate(nn::GPT& stage_model, comm::Communicator& pp, std::vector<int32_t> tokens,
                                       int new_tokens, float temperature, int top_k, nn::Rng& rng);

}  // namespace parallel
