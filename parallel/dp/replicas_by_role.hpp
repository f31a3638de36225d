// Data parallelism over the ranks that replicate each parameter, by its role (parallel/grid.hpp,
// Grid::replicas_of): every dense parameter over dp × cp, an expert over the ranks that hold the
// same expert (expert parallelism, parallel/ep/). What every dp rank does to all of its
// parameters — average their gradients, start from rank 0's values — runs once per group:
//
//   dense     over dp_group (the replicas and their cp ranks): the mean of every rank's gradient
//   experts   over expert_dp_group, then × 1/ep: the dispatch's backward already summed, on each
//             expert's rank, the gradients of the ep ranks whose tokens it computed; the
//             expert-dp sum adds the other ep groups' — Σ over all dp ranks — and the mean over
//             dp divides by dp = (dp/ep)·ep (Grid::summed_before_averaging)
//
// The overlapped averager (--ddp bucketed) buckets each group's parameters apart, and every
// bucket is sent as backward completes it, whatever its group.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/gpt.hpp"
#include "parallel/dp/gradient_averaging.hpp"
#include "parallel/dp/gradient_wire.hpp"
#include "parallel/grid.hpp"

namespace parallel {

// The model's parameters split by the group that replicates them, in the order the groups are
// first met: the group, how many ranks summed the gradients before (Grid::summed_before_averaging),
// the indices into model.parameters().
struct RoleGroup {
  comm::Communicator* group;
  int summed;
  std::vector<int> indices;
};
std::vector<RoleGroup> role_groups(const std::vector<nn::NamedTensor>& parameters, Grid& grid);

// After backward, in one blocking call per group.
void average_gradients_by_role(std::vector<nn::NamedTensor>& parameters, Grid& grid, GradientWire wire);

// `kind`'s averager (naive, bucketed) for each group of the model's parameters, under one
// grad-ready hook; null when no parameter has a replica.
std::unique_ptr<GradientAverager> make_averager_by_role(DdpKind kind, nn::GPT& model, Grid& grid,
                                                        std::size_t bucket_bytes, GradientWire wire);

// Rank 0's parameters and moments (and the optimizer's step) on every rank of each parameter's
// replica group. `optimizer` may be null.
void broadcast_state_by_role(std::vector<nn::NamedTensor>& parameters, nn::AdamW* optimizer, Grid& grid);

}  // namespace parallel
