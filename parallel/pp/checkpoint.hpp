// Checkpoints of a pipeline are the same one nanoGPT-named model.safetensors (+ optimizer
// moments) as every other trainer's: stage 0 of the first pipeline gathers every stage's
// parameters and moments, by name, into a whole model and writes it (nn::save_checkpoint,
// atomic); to load, it reads the whole model and hands each stage its tensors by name. So a
// pipeline checkpoint loads in train_dp, in PyTorch, and under any other number of stages,
// schedule or --dp.
//
// Call on the ranks of the first pipeline (dp_rank 0) only; broadcast over the dp group after
// loading. Costs rank 0 one whole model's memory (a teaching project's trade-off).
#pragma once
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "nn/adamw.hpp"
#include "nn/checkpoint_writer.hpp"
#include "nn/gpt.hpp"

namespace parallel {

// The tensors of parameter `name` in the order they travel: values, then (with an optimizer)
// its two moments.
std::vector<std::span<float>> tensors_of(nn::GPT& model, nn::AdamW* optimizer, const std::string& name);

// Collective over `pp`: stage 0 gathers the whole model and hands it to `writer` (which writes
// it now, or in the background).
void save_pipeline_checkpoint(const std::filesystem::path& dir, nn::GPT& stage_model, nn::AdamW& optimizer,
                              const nlohmann::json& train_state, comm::Communicator& pp,
                              nn::CheckpointWriter& writer);

// Hands each stage its tensors from the whole model (and optimizer) that stage 0 has already
// read — read it first, inside trainers::on_rank0_then_agree, so a bad file ends every rank
// with one line instead of leaving the other stages waiting here. `whole` and
// `whole_optimizer` are used on stage 0 only; `optimizer` may be null (weights only).
void distribute_pipeline_checkpoint(nn::GPT& stage_model, nn::AdamW* optimizer, comm::Communicator& pp, nn::GPT* whole,
                                    nn::AdamW* whole_optimizer);

}  // namespace parallel
