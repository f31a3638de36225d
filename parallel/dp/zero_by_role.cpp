#include "parallel/dp/zero_by_role.hpp"

#include <array>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "nn/grad_clip.hpp"
#include "parallel/dp/replicas_by_role.hpp"
#include "parallel/pp/tied_embedding.hpp"

namespace parallel {
namespace {

// Gradients that need another sum before their average (step 1): the replicated ones (summed
// over tp under sequence parallelism) and, across a pipeline, the tied embedding's two copies.
bool summed_late(const nn::GPT& model, const nn::NamedTensor& p, int pp) {
  const nn::Tensor wte = model.tied_embedding();
  return p.role == nn::ParameterRole::replicated || (pp > 1 && wte.defined() && p.tensor.same_storage(wte));
}

// `indices` (one role's) laid out as ZeroOptimizer shards them: each grad-ready group's members
// among them, the late ones apart.
ZeroPart part_of(const nn::GPT& model, const std::vector<int>& indices, int summed, int pp) {
  ZeroPart part{.summed = summed, .own_hook = false};
  std::vector<bool> mine(model.parameters().size(), false);
  for (int i : indices) mine[static_cast<std::size_t>(i)] = true;
  for (const std::vector<int>& group : model.grad_ready_groups()) {
    std::vector<int> early;
    for (int i : group) {
      if (!mine[static_cast<std::size_t>(i)]) continue;
      (summed_late(model, model.parameters()[static_cast<std::size_t>(i)], pp) ? part.late : early).push_back(i);
    }
    if (!early.empty()) part.groups.push_back(std::move(early));
  }
  return part;
}

// Σ g² buckets: every element of the whole model once (as nn::GPT::squared_grad_norm counts).
enum Bucket { kExperts, kCut, kWhole, kBuckets };

}  // namespace

ZeroByRole::ZeroByRole(int stage, nn::GPT& model, const nn::AdamWConfig& config, Grid& grid, GradientWire wire)
    : stage_(stage), model_(model), grid_(grid), wire_(wire) {
  for (const RoleGroup& g : role_groups(model.parameters(), grid)) {
    Role role{.group = g.group, .summed = g.summed, .ranks = g.group->size()};
    for (int i : g.indices) role.parameters += static_cast<double>(model.parameters()[static_cast<std::size_t>(i)].tensor.numel());
    role.optimizer = std::make_unique<ZeroOptimizer>(stage, model, part_of(model, g.indices, g.summed, grid.pp), config,
                                                     *g.group, wire);
    roles_.push_back(std::move(role));
  }
  model_.set_grad_ready_hook([this](std::span<const int> ready) {
    for (Role& r : roles_) r.optimizer->on_gradients_ready(ready);
  });
}

ZeroByRole::~ZeroByRole() { model_.set_grad_ready_hook({}); }

void ZeroByRole::start(const nn::AdamW* full) {
  for (Role& r : roles_) r.optimizer->start(r.group->rank() == 0 ? full : nullptr);
}

void ZeroByRole::before_backward(bool last_micro_step) {
  for (Role& r : roles_) r.optimizer->before_backward(last_micro_step);
}

float ZeroByRole::finish_gradients(float max_norm) {
  model_.sum_replicated_grads();                              // 1. sequence parallelism's share of positions
  sum_tied_embedding_grads(model_, grid_.pp_group);            //    the first and last stage's copies
  for (Role& r : roles_) r.optimizer->finish_gradients();      // 2. every shard its average
  // 3. The norm, from the shards.
  const nn::Tensor wte = model_.tied_embedding();
  const auto bucket = [&](int i) {
    const nn::NamedTensor& p = model_.parameters()[static_cast<std::size_t>(i)];
    if (!model_.part().embedding && wte.defined() && p.tensor.same_storage(wte)) return -1;  // the head's copy
    if (p.role == nn::ParameterRole::expert) return static_cast<int>(kExperts);
    return static_cast<int>(model_.layers().weights->is_cut(p.role) ? kCut : kWhole);
  };
  std::array<double, kBuckets> squares{};
  for (Role& r : roles_) {
    std::vector<double> mine = r.optimizer->shard_squares(bucket, kBuckets);
    r.group->allreduce(std::span<double>(mine), comm::ReduceOp::sum);  // this copy's whole tensors
    for (int b = 0; b < kBuckets; ++b) squares[static_cast<std::size_t>(b)] += mine[static_cast<std::size_t>(b)];
  }
  double total = model_.layers().dispatcher->sum_over_holders(squares[kExperts]) +
                 model_.layers().weights->sum_over_group(squares[kCut]) + squares[kWhole];
  if (grid_.pp > 1) grid_.pp_group.allreduce(std::span<double>(&total, 1));
  const float norm = static_cast<float>(std::sqrt(total));
  const float coef = nn::clip_coefficient(max_norm, norm);
  if (coef < 1.0f && std::isfinite(norm))
    for (Role& r : roles_) r.optimizer->scale_gradient_shards(coef);
  return norm;
}

void ZeroByRole::step(float lr) {
  for (Role& r : roles_) r.optimizer->step(lr);
  for (Role& r : roles_) r.optimizer->zero_grad();
}

void ZeroByRole::gather_optimizer(nn::AdamW* into) {
  for (Role& r : roles_) r.optimizer->gather_optimizer(r.group->rank() == 0 ? into : nullptr);
}

HeldBytes ZeroByRole::held() const {
  HeldBytes h = held_by_tensors(model_.parameters());
  for (const Role& r : roles_) h += r.optimizer->shard_bytes();
  return h;
}

HeldBytes ZeroByRole::formula() const {
  HeldBytes sum;
  for (const Role& r : roles_) sum += zero_formula_held(stage_, r.parameters, r.ranks);
  return sum;
}

std::string ZeroByRole::describe() const {
  std::vector<std::string> parts;
  for (const Role& r : roles_)
    parts.push_back(fmt::format("{:.0f} parameters over {} rank(s){}", r.parameters, r.ranks,
                                r.summed > 1 ? fmt::format(" (experts, then × 1/{})", r.summed) : ""));
  return fmt::format("ZeRO stage {} by role: {}; {}, AdamW on each shard, parameters all-gathered{}", stage_,
                     fmt::join(parts, "; "),
                     stage_ == 1 ? "optimizer state sharded, gradients reduce-scattered after the last micro-batch's "
                                   "backward"
                                 : "optimizer state and gradients sharded, each group's gradients reduce-scattered as "
                                   "each micro-batch's backward finishes it",
                     wire_note(wire_));
}

}  // namespace parallel
