// What one rank of a DP × PP × TP job holds — its place in the grid and its slice of the
// model — and what the tensor-parallel trainers (train_tp, train_3d) do with it beyond the
// step itself: load and save the one nanoGPT checkpoint, evaluate, sample, clip.
//
//   grid:   (dp, pp, tp), tp fastest (parallel/grid.hpp)
//   model:  pipeline stage pp_rank's blocks (parallel::stage_layers), each big matmul split
//           over the stage's tp group (parallel::TensorParallelGPT)
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/adamw.hpp"
#include "nn/data.hpp"
#include "parallel/grid.hpp"
#include "parallel/tp_gpt.hpp"
#include "trainers/evaluation.hpp"
#include "trainers/step_traffic.hpp"
#include "trainers/train_options.hpp"

namespace trainers {

struct Splits;

struct GridShape {
  int dp = 1, pp = 1, tp = 1;
  std::vector<int> stage_layers;  // empty: even
  bool sequence_parallel = false;
};

// Refuses, in one line, what cannot be built: a world size other than dp·pp·tp, n_head not
// divisible by tp, sequence parallelism with tp = 1 or block_size not divisible by tp, more
// stages than blocks.
void check_grid(const GridShape& shape, const nn::GPTConfig& config, int world_size);

// --eval-only and --sample-only of a checkpoint under this grid.
void grid_eval_only(const TrainOptions& o, const GridShape& shape, comm::Communicator& world);
void grid_sample_only(const TrainOptions& o, const GridShape& shape, comm::Communicator& world);

struct GridModel {
  parallel::Grid grid;
  std::vector<int> layers;  // blocks per stage
  parallel::TensorParallelGPT model;

  // Every replica draws the same start from `seed` (each rank keeps its slice of its stage).
  GridModel(comm::Communicator& world, const GridShape& shape, const nn::GPTConfig& config, uint64_t seed);

  bool first() const { return grid.pp_rank == 0; }
  bool last() const { return grid.pp_rank == grid.pp - 1; }

  // Reads a checkpoint on world rank 0 (a bad file: one line on every rank) and gives every
  // rank of every replica its slice; `optimizer` may be null (weights only).
  void load(const std::filesystem::path& dir, nn::AdamW* optimizer, comm::Communicator& world);
  // The first replica gathers and writes the whole model (atomic, as every trainer's).
  void save(const std::filesystem::path& dir, nn::AdamW& optimizer, const nlohmann::json& train_state);
  // Rank 0 of the dp group's parameters and moments on every replica.
  void broadcast_over_replicas(nn::AdamW* optimizer);

  // The loss of a batch (evaluation mode), the same on every rank of the replica.
  BatchLoss batch_loss();
  std::string sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t seed);
  // nanoGPT's estimate_loss on the train and val splits at `step` (the replicas share the batches).
  std::pair<float, float> estimate(const Splits& data, const TrainOptions& o, int64_t step);
  // The first replica samples (every rank of it takes part); rank 0 prints.
  void print_sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, int64_t step,
                    comm::Communicator& world);

  // After backward: sums the sequence-parallel replicated gradients over tp, the tied
  // embedding over first and last stage, averages over the dp replicas; then the global norm
  // (every element of the whole model counted once), clipping to max_norm. Returns the norm.
  float finish_gradients(float max_norm);

  // "rank 5 = dp 1 · pp 0 · tp 1, …"
  std::string layout(int world_size) const { return grid.layout(world_size); }

  // What the training steps moved through this rank's tp, pp and dp groups.
  StepTraffic traffic{{{"tp", &grid.tp_group}, {"pp", &grid.pp_group}, {"dp", &grid.dp_group}}};
};

}  // namespace trainers
