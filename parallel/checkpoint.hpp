// The one checkpoint of every layout: one nanoGPT-named model.safetensors (+ the AdamW moments)
// of the whole model, whatever grid (dp, pp, tp) wrote it — so it loads under any other, in
// train_dp and in PyTorch.
//
//   save:  each stage's tp group gathers its cut parameters whole on its tp rank 0, by each
//          parameter's role (nn::WeightCut::gather; the vocabulary's padding rows cut); those
//          ranks are one pipeline, whose stage 0 collects every stage's tensors by name into
//          the whole model and hands it to the writer (atomic, now or in the background)
//   load:  the way back — stage 0 hands each stage its tensors by name from the whole model
//          world rank 0 read, tp rank 0 broadcasts them over its group, and every rank keeps
//          its cut (nn::WeightCut::shard)
//
//   expert parallelism: each ep rank of the first replica's ep group sends its experts by name
//          to ep rank 0, whose copy of the stage holds every expert (and the way back)
//
// Both are collective over the first replica's ep group (Grid::first_expert_group: dp_rank 0
// when ep is 1); broadcast over dp_group (the experts over expert_dp_group) after loading. They cost tp rank 0 a whole stage's memory and pipeline rank 0 a whole model's (a
// teaching project's trade-off).
#pragma once
#include <filesystem>

#include <nlohmann/json.hpp>

#include "nn/adamw.hpp"
#include "nn/checkpoint_writer.hpp"
#include "nn/gpt.hpp"
#include "parallel/grid.hpp"

namespace parallel {

// `optimizer` steps the model's parameters(), in that order.
void save_checkpoint(const std::filesystem::path& dir, nn::GPT& model, nn::AdamW& optimizer,
                     const nlohmann::json& train_state, Grid& grid, nn::CheckpointWriter& writer);

// `whole` and `whole_optimizer`: the whole model read by world rank 0 — read it first, inside
// trainers::on_rank0_then_agree, so a bad file ends every rank with one line instead of leaving
// the others waiting here — used there only; `optimizer` may be null (weights only).
void distribute_checkpoint(nn::GPT& model, nn::AdamW* optimizer, Grid& grid, nn::GPT* whole,
                           nn::AdamW* whole_optimizer);

}  // namespace parallel
