// What one rank of a DP × PP × CP × TP job holds — its place in the grid and its piece of the
// model — and what the grid trainers (train_pp, train_tp, train_3d) do with it beyond the
// step itself: load and save the one nanoGPT checkpoint, evaluate, sample, finish gradients.
//
//   grid:   (dp, pp, cp, tp), tp fastest (parallel/grid.hpp)
//   model:  one nn::GPT, whatever the layout: pipeline stage pp_rank's part of it
//           (parallel::stage_part), each big matmul split over the stage's tp group by its
//           layers (parallel::make_tensor_parallel, with_context_parallel, with_expert_parallel:
//           each null, the whole one, when its dimension is 1)
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/adamw.hpp"
#include "nn/data.hpp"
#include "parallel/cp/context_parallel_layers.hpp"
#include "parallel/ep/expert_parallel_layers.hpp"
#include "parallel/grid.hpp"
#include "parallel/tp/tensor_parallel_layers.hpp"
#include "parallel/layout.hpp"
#include "trainers/evaluation.hpp"
#include "parallel/dp/gradient_averaging.hpp"
#include "parallel/dp/zero_by_role.hpp"
#include "trainers/inference_modes.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/train_options.hpp"
#include "trainers/training_loop.hpp"

namespace trainers {

// The layout (parallel/layout.hpp: the degrees, their rules, the micro-batches) and how ring
// attention overlaps its hops.
struct GridShape : parallel::Layout {
  bool cp_overlap = true;  // ring attention: the next block's transfer posted before the current block's compute
};

// What the layout is asked to run here: the model on world_size ranks, a replica's batch
// (--batch-size), the precision and attention kernel the flags resolve to.
parallel::LayoutJob layout_job(const TrainOptions& o, const nn::GPTConfig& config, int world_size);

// --eval-only and --sample-only (inference_modes.hpp) of a checkpoint under this grid: each
// rank loads its piece; the first replica samples.
std::unique_ptr<LoadedModel> load_grid_model(const GridShape& shape, const TrainOptions& o, const Start& start,
                                             comm::Communicator& world);

// Testing faults this rank injects (train_3d --skip-ring-at-step, --skip-dispatch-at-step, on
// --crash-rank): -1 for none.
struct LayerFaults {
  int64_t skip_ring_at_step = -1;
  int64_t skip_dispatch_at_step = -1;
};

class GridModel {
 public:
  // Every rank of a replica draws its stage's part of the same start from `seed`.
  // `modes`: how its piece computes (precision, attention kernel, recompute, fusion).
  GridModel(comm::Communicator& world, const GridShape& shape, const nn::GPTConfig& config, uint64_t seed,
            const nn::ComputeModes& modes, const LayerFaults& faults = {});

  parallel::Grid grid;
  std::vector<int> layers;  // blocks per stage (per chunk, in model order, with virtual stages)

  // This rank's piece: its stage's part of the model, its cut of every big matmul.
  nn::GPT& model() { return model_; }
  const nn::GPT& model() const { return model_; }
  std::vector<nn::NamedTensor> parameters() const { return model_.parameters(); }  // the optimizer's order
  // The step about to run (the layers' testing faults).
  void begin_step(int64_t step);
  // The model's routing statistics, with the expert dispatch's time since the last call added.
  nn::RoutingStats& routing_stats();

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
  // The pieces built for the model's layers (each null when its dimension is 1): typed handles,
  // kept beside the model that computes with them.
  struct Pieces {
    std::shared_ptr<parallel::TensorParallelLayers> tensor;
    std::shared_ptr<parallel::ContextParallelSequence> context;
    std::shared_ptr<parallel::ExpertParallelDispatcher> experts;
    std::shared_ptr<nn::TokenDispatcher> dispatcher;  // experts, or (tp > 1) their folding over tp
    nn::GPTLayers layers() const;
  };
  static Pieces build_pieces(parallel::Grid& grid, const GridShape& shape, const nn::GPTConfig& config,
                             const LayerFaults& faults);
  Pieces pieces_;
  nn::GPT model_;
};

// What every grid trainer does the same way around the step: AdamW on this rank's piece,
// evaluation and samples by the first replica, the checkpoint, the traffic of its groups.
class GridStrategy : public Strategy {
 public:
  GridStrategy(const RunStart& run, comm::Communicator& world, const GridShape& shape, uint64_t seed,
               const LayerFaults& faults = {});

  void optimizer_step(float lr) override;
  parallel::HeldBytes held() const override;
  std::pair<float, float> evaluate(int64_t step) override;
  double full_val_loss() override;
  void print_sample(int64_t step) override;
  void save(const std::filesystem::path& dir, const nlohmann::json& train_state, nn::CheckpointWriter& writer) override;
  void at_end() override;  // check mode: the tied embedding's two copies still equal
  nn::RoutingStats& routing_stats() override { return grid_model_.routing_stats(); }

 protected:
  int T() const { return run_.start.config.block_size; }
  // The groups' traffic, named "tp", "cp" (with cp > 1), "pp", "dp", "ep" and "expert dp" (with
  // ep > 1) (StrategyFacts::groups).
  std::vector<std::pair<std::string, const comm::Communicator*>> grid_groups() const;
  void verify_tied_copies();  // check mode: collective over the pipeline
  const RunStart& run_;
  const TrainOptions& o_;
  comm::Communicator& world_;
  // The memory line's formula under --zero (this rank's, by role), or none.
  StrategyFacts::MemoryFormula zero_memory_formula() const;
  const GridShape shape_;  // the layout this rank runs
  GridModel grid_model_;
  parallel::Grid& grid_ = grid_model_.grid;
  // The update: AdamW with every moment of this rank's piece (optimizer_), or with --zero 1|2
  // each role's shards over the ranks replicating it (zero_, parallel/dp/zero_by_role.hpp).
  std::unique_ptr<nn::AdamW> optimizer_;
  std::unique_ptr<parallel::ZeroByRole> zero_;
};

}  // namespace trainers
