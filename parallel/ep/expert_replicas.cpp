#include "parallel/ep/expert_replicas.hpp"

#include <array>

#include "parallel/dp/gradient_averaging.hpp"

namespace parallel {
namespace {

bool is_expert(const nn::NamedTensor& p) { return p.role == nn::ParameterRole::expert; }

}  // namespace

void average_gradients_with_experts(std::vector<nn::NamedTensor>& parameters, Grid& grid, GradientWire wire) {
  std::vector<nn::NamedTensor> experts, rest;
  for (const nn::NamedTensor& p : parameters) (is_expert(p) ? experts : rest).push_back(p);
  if (grid.dp_group.size() > 1 && !rest.empty()) average_gradients(rest, grid.dp_group, wire);
  if (grid.expert_dp_group.size() > 1 && !experts.empty()) average_gradients(experts, grid.expert_dp_group, wire);
  const float share = 1.0f / static_cast<float>(grid.ep);
  for (const nn::NamedTensor& p : experts)
    for (float& g : p.tensor.grad_values()) g *= share;
}

void broadcast_state_with_experts(std::vector<nn::NamedTensor>& parameters, nn::AdamW* optimizer, Grid& grid) {
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    comm::Communicator& group = is_expert(parameters[i]) ? grid.expert_dp_group : grid.dp_group;
    if (group.size() == 1) continue;
    group.broadcast(parameters[i].tensor.values(), 0);
    if (!optimizer) continue;
    group.broadcast(optimizer->exp_avg()[i].values(), 0);
    group.broadcast(optimizer->exp_avg_sq()[i].values(), 0);
  }
  if (!optimizer) return;
  std::array<int64_t, 1> steps{optimizer->steps()};
  grid.dp_group.broadcast(std::span<int64_t>(steps), 0);
  optimizer->set_steps(steps[0]);
}

}  // namespace parallel
