// Checkpoints of tensor-parallel (and 3-D) training are the same one nanoGPT-named
// model.safetensors (+ optimizer moments) as every other trainer's. Each stage's tp group
// gathers its slices into the stage's whole parameters and moments on its tp rank 0 (one
// all-gather per tensor; the vocabulary's padding rows are cut); those tp-rank-0 ranks are one
// pipeline, which saves as train_pp does (parallel/pp/checkpoint.hpp). Loading is the way back:
// the pipeline hands each stage its whole tensors, tp rank 0 broadcasts them over the tp group,
// and every rank keeps its slice. So a checkpoint written under any (dp, pp, tp) loads under any
// other, in train_dp, train_pp and PyTorch.
//
// Call on the ranks of the first replica (dp_rank 0); broadcast over dp_group after loading.
#pragma once
#include <filesystem>

#include <nlohmann/json.hpp>

#include "nn/adamw.hpp"
#include "nn/checkpoint_writer.hpp"
#include "nn/gpt.hpp"
#include "parallel/grid.hpp"
#include "parallel/tp/tensor_parallel_gpt.hpp"

namespace parallel {

// `optimizer` steps the model's parameters(), in that order.
void save_tensor_parallel_checkpoint(const std::filesystem::path& dir, TensorParallelGPT& model, nn::AdamW& optimizer,
                                     const nlohmann::json& train_state, Grid& grid, nn::CheckpointWriter& writer);

// `whole` and `whole_optimizer`: the whole model read by world rank 0 (inside
// trainers::on_rank0_then_agree), used there only; `optimizer` may be null (weights only).
void distribute_tensor_parallel_checkpoint(TensorParallelGPT& model, nn::AdamW* optimizer, Grid& grid, nn::GPT* whole,
                                           nn::AdamW* whole_optimizer);

}  // namespace parallel
