// The one checkpoint of every layout: one nanoGPT-named model.safetensors (+ the AdamW moments)
// of the whole model, whatever grid (dp, pp, tp) wrote it — so it loads under any other, in
// train_dp and in PyTorch.
//
//   save:  each stage's tp group gathers its cut parameters whole on its tp rank 0, by each
//          parameter's role (nn::WeightCut::gather; the vocabulary's padding rows cut); those
//          ranks of the first copy of the model (Grid::checkpoint_group: every stage, and with
//          experts spread over an ep group, every ep rank) send rank 0 of the group the
//          tensors the checkpoint takes from them, by name — by role (Grid::checkpoint_takes:
//          an ep rank's own experts; everything else from ep rank 0) — and it hands the whole
//          model to the writer (atomic, now or in the background)
//   load:  the way back — rank 0 of the group hands each of its ranks every tensor it holds,
//          by name, from the whole model world rank 0 read; tp rank 0 broadcasts each over its
//          group, and every rank keeps its cut (nn::WeightCut::shard)
//
// Both are collective over the first copy's ranks (Grid::in_first_copy: the first replica, with
// its ep group); each parameter is broadcast over the ranks holding its copy after loading
// (Grid::replicas_of). They cost tp rank 0 a whole stage's memory and the group's rank 0 a
// whole model's (a teaching project's trade-off).
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
