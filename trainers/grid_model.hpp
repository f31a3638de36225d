// What one rank of a DP × PP × CP × TP job holds — its place in the grid and its piece of the
// model — and what the grid trainers (train_pp, train_tp, train_3d) do with it beyond the
// step itself: load and save the one nanoGPT checkpoint, evaluate, sample, finish gradients.
//
//   grid:   (dp, pp, cp, tp), tp fastest (parallel/grid.hpp)
//   model:  one nn::GPT, whatever the layout: pipeline stage pp_rank's part of it
//           (parallel::stage_part), each big matmul split over the stage's tp group by its
//           layers (parallel::make_gpt_layers: tensor-parallel ones, or whole ones when tp = 1)
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/adamw.hpp"
#include "nn/data.hpp"
#include "parallel/cp/context_parallel_layers.hpp"  // CpAttention
#include "parallel/ep/expert_parallel_layers.hpp"
#include "parallel/grid.hpp"
#include "trainers/evaluation.hpp"
#include "parallel/dp/gradient_averaging.hpp"
#include "trainers/inference_modes.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/train_options.hpp"
#include "trainers/training_loop.hpp"

namespace trainers {

struct GridShape {
  int dp = 1, pp = 1, tp = 1;
  int cp = 1;  // context parallelism (train_3d --cp): each rank T/cp positions of every sequence
  parallel::CpAttention cp_attention = parallel::CpAttention::ring;
  bool cp_overlap = true;  // ring attention: the next block's transfer posted before the current block's compute
  int ep = 1;  // expert parallelism (train_3d --ep): each rank of an ep group of dp ranks holds E/ep experts
  std::vector<int> stage_layers;  // empty: even
  bool sequence_parallel = false;
  int virtual_stages = 1;     // chunks per stage (interleaved 1F1B): stage_layers lists pp·V of them
  // dp·pp·cp·tp in a double (the product of four ints overflows an int; exact below 2^53).
  double ranks() const { return static_cast<double>(dp) * pp * cp * tp; }
};

// Refuses, in one line, what cannot be built: a world size other than dp·pp·cp·tp, n_head not
// divisible by tp, sequence parallelism with tp = 1 or block_size not divisible by tp, more
// stages than blocks; block_size not divisible by 2·cp, Ulysses with heads per tp rank not
// divisible by cp, cp with sequence parallelism and an odd tp or one not dividing T/cp; ep
// without a mixture of experts, not dividing dp or the experts.
void check_grid(const GridShape& shape, const nn::GPTConfig& config, int world_size);
// The blocks of each of the pp·V chunks in model order (V = 1: of each stage): --stage-layers,
// or even. Throws comm::UsageError naming the rule (V > 1 needs pp ≥ 2, a block per chunk).
std::vector<int> chunk_layers(const GridShape& shape, int n_layer);

// --eval-only and --sample-only (inference_modes.hpp) of a checkpoint under this grid: each
// rank loads its piece; the first replica samples.
std::unique_ptr<LoadedModel> load_grid_model(const GridShape& shape, const TrainOptions& o, const Start& start,
                                             comm::Communicator& world);

class GridModel {
 public:
  // Every rank of a replica draws its stage's part of the same start from `seed`.
  // `modes`: how its piece computes (precision, attention kernel, recompute, fusion).
  GridModel(comm::Communicator& world, const GridShape& shape, const nn::GPTConfig& config, uint64_t seed,
            const nn::ComputeModes& modes);

  parallel::Grid grid;
  std::vector<int> layers;  // blocks per stage (per chunk, in model order, with virtual stages)

  // This rank's piece: its stage's part of the model, its cut of every big matmul.
  nn::GPT& model() { return model_; }
  const nn::GPT& model() const { return model_; }
  std::vector<nn::NamedTensor> parameters() const { return model_.parameters(); }  // the optimizer's order
  // The model's context-parallel layers, or null without --cp; its expert-parallel ones, or
  // null without --ep.
  parallel::ContextParallelLayers* context_parallel_layers() {
    return dynamic_cast<parallel::ContextParallelLayers*>(&model_.layers());
  }
  parallel::ExpertParallelLayers* expert_parallel_layers() {
    return dynamic_cast<parallel::ExpertParallelLayers*>(&model_.layers());
  }

  // Reads a checkpoint on world rank 0 (a bad file: one line on every rank) and gives every
  // rank of every replica its piece; `optimizer` may be null (weights only).
  void load(const std::filesystem::path& dir, nn::AdamW* optimizer, comm::Communicator& world);
  // The first replica gathers and writes the whole model (atomic, as every trainer's).
  void save(const std::filesystem::path& dir, nn::AdamW& optimizer, const nlohmann::json& train_state,
            nn::CheckpointWriter& writer);
  // Rank 0 of the dp group's parameters and moments on every replica (the experts: the first ep
  // group's holder's).
  void broadcast_over_replicas(nn::AdamW* optimizer);

  // The loss of a batch (evaluation mode), the same on every rank of the replica.
  BatchLoss batch_loss();
  std::string sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t stream);

  // This stage's Σ g², the tied embedding counted once (on the first stage), summed over the
  // pipeline: the global norm, every element of the whole model counted once.
  float global_grad_norm();
  // After backward, for every layout: the average over the dp replicas (and their cp ranks) — `averager`'s,
  // overlapped with backward (train_pp, train_3d), or one blocking allreduce after it (null
  // with dp > 1) — the sequence-parallel replicated gradients summed over tp, the tied
  // embedding over first and last stage; then the global norm, clipping to max_norm. Returns
  // the norm.
  float finish_gradients(float max_norm, parallel::GradientWire wire,  // wire: --grad-comm over dp
                         parallel::GradientAverager* averager = nullptr);

 private:
  nn::GPT model_;
};

// What every grid trainer does the same way around the step: AdamW on this rank's piece,
// evaluation and samples by the first replica, the checkpoint, the traffic of its groups.
class GridStrategy : public Strategy {
 public:
  GridStrategy(const RunStart& run, comm::Communicator& world, const GridShape& shape, uint64_t seed);

  void optimizer_step(float lr) override;
  parallel::HeldBytes held() const override;
  std::pair<float, float> evaluate(int64_t step) override;
  double full_val_loss() override;
  void print_sample(int64_t step) override;
  void save(const std::filesystem::path& dir, const nlohmann::json& train_state, nn::CheckpointWriter& writer) override;
  void at_end() override;  // check mode: the tied embedding's two copies still equal
  nn::RoutingStats& routing_stats() override { return grid_model_.model().routing_stats(); }

 protected:
  int T() const { return run_.start.config.block_size; }
  // The groups' traffic, named "tp", "cp" (with cp > 1), "pp", "dp", "ep" and "expert dp" (with
  // ep > 1) (StrategyFacts::groups).
  std::vector<std::pair<std::string, const comm::Communicator*>> grid_groups() const;
  void verify_tied_copies();  // check mode: collective over the pipeline
  const RunStart& run_;
  const TrainOptions& o_;
  comm::Communicator& world_;
  GridModel grid_model_;
  parallel::Grid& grid_ = grid_model_.grid;
  nn::AdamW optimizer_;
};

}  // namespace trainers
