// ZeRO on the grid (train_3d --zero 1|2): each rank shards the optimizer state (stage 2: and the
// gradients) of the parameters it holds over the ranks that replicate them — as Megatron's
// distributed optimizer does — one parallel::ZeroOptimizer per role (parallel/grid.hpp):
//
//   dense parameters   over dp × cp (Grid::dp_group): a stage's, a tp rank's slice of them
//   experts (ep > 1)   over the expert-data-parallel ranks, then × 1/ep (their dispatch's
//                      backward already summed the ep group's tokens)
//
// A step, after backward (the reduce-scatters started from inside it, group by group):
//   1. the sums another dimension needs, on the gradients kept whole for them ("late"): the
//      sequence-parallel replicated ones over tp, the tied embedding over the pipeline's ends
//   2. the late group reduce-scattered; every shard now holds its average
//   3. the global norm: Σ g² of every shard, each element of the whole model once — the
//      shards summed over their replica group, the tp-cut ones over tp, the experts over ep,
//      every stage over the pipeline — and the shards clipped
//   4. AdamW on the shards, the parameters all-gathered over the replica group
//
// Stage 3 stays in train_dp: on the grid each block's gathers would have to follow the
// pipeline's schedule and the tensor-parallel cuts (parallel/layout.cpp says so in one line).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/gpt.hpp"
#include "parallel/dp/gradient_wire.hpp"
#include "parallel/dp/zero_optimizer.hpp"
#include "parallel/grid.hpp"

namespace parallel {

class ZeroByRole {
 public:
  ZeroByRole(int stage, nn::GPT& model, const nn::AdamWConfig& config, Grid& grid, GradientWire wire);
  ~ZeroByRole();
  ZeroByRole(const ZeroByRole&) = delete;
  ZeroByRole& operator=(const ZeroByRole&) = delete;

  // Collective, once: the parameters are the same on every replica already; `full` is this
  // rank's piece's whole AdamW state where a group's rank 0 has one (null: a fresh start).
  void start(const nn::AdamW* full);
  void before_backward(bool last_micro_step);
  // Steps 1-3 above; returns the global norm before clipping (max_norm ≤ 0: not clipped).
  float finish_gradients(float max_norm);
  void step(float lr);  // step 4, then the gradients zeroed
  // Collective: the moments of every parameter this rank holds into `into`, on the ranks that are
  // rank 0 of their groups (the first copy's: the checkpoint's ranks); null elsewhere.
  void gather_optimizer(nn::AdamW* into);

  HeldBytes held() const;
  // The paper's formula (zero_formula_held) summed over the roles: each role's parameters
  // here over its group's ranks.
  HeldBytes formula() const;
  std::string describe() const;

 private:
  struct Role {
    comm::Communicator* group = nullptr;  // the ranks replicating these parameters
    int summed = 1;                       // Grid::summed_before_averaging
    int ranks = 1;
    double parameters = 0;  // elements this rank holds of the role's
    std::unique_ptr<ZeroOptimizer> optimizer;
  };
  int stage_;
  nn::GPT& model_;
  Grid& grid_;
  GradientWire wire_;
  std::vector<Role> roles_;
};

}  // namespace parallel
