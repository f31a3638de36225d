// Data parallelism around expert parallelism: the ranks of an ep group hold the same
// parameters but for the experts, of which each holds its own E/ep. So what every dp rank does
// to all of its parameters (parallel/dp/replicas.hpp, gradient_averaging.hpp) splits in two:
//
//   the rest      over dp_group, as without experts: the mean of every dp rank's gradient
//   the experts   over expert_dp_group (the dp/ep ranks holding the same experts), then × 1/ep:
//                 the dispatch's backward already summed, on each expert's rank, the gradients
//                 of the ep ranks whose tokens it computed; the expert-dp sum adds the other ep
//                 groups' — Σ over all dp ranks — and the mean over dp divides by dp =
//                 (dp/ep)·ep
#pragma once
#include <vector>

#include "nn/adamw.hpp"
#include "nn/gpt.hpp"
#include "parallel/dp/gradient_wire.hpp"
#include "parallel/grid.hpp"

namespace parallel {

void average_gradients_with_experts(std::vector<nn::NamedTensor>& parameters, Grid& grid, GradientWire wire);

// Rank 0's parameters and moments on every dp rank: the experts' from the first ep group's
// holder of the same experts (over expert_dp_group). `optimizer` may be null.
void broadcast_state_with_experts(std::vector<nn::NamedTensor>& parameters, nn::AdamW* optimizer, Grid& grid);

}  // namespace parallel
