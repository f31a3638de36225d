#include "parallel/dp/replicas_by_role.hpp"

#include <algorithm>
#include <array>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace parallel {

std::vector<RoleGroup> role_groups(const std::vector<nn::NamedTensor>& parameters, Grid& grid) {
  std::vector<RoleGroup> groups;
  for (int i = 0; i < static_cast<int>(parameters.size()); ++i) {
    const nn::ParameterRole role = parameters[static_cast<std::size_t>(i)].role;
    comm::Communicator* group = &grid.replicas_of(role);
    const int summed = grid.summed_before_averaging(role);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const RoleGroup& g) { return g.group == group && g.summed == summed; });
    if (it == groups.end()) it = groups.insert(groups.end(), RoleGroup{group, summed, {}});
    it->indices.push_back(i);
  }
  return groups;
}

namespace {

void scale_gradients(std::span<const nn::Tensor> tensors, int summed) {
  if (summed == 1) return;
  const float share = 1.0f / static_cast<float>(summed);
  for (const nn::Tensor& t : tensors)
    for (float& g : t.grad_values()) g *= share;
}

// One averager per group under the model's one grad-ready hook, which hands each group its
// gradients as backward completes them (by the group's own indices).
class AveragerByRole final : public GradientAverager {
 public:
  AveragerByRole(DdpKind kind, nn::GPT& model, std::vector<RoleGroup> groups, std::size_t bucket_bytes,
                 GradientWire wire)
      : model_(model), groups_(std::move(groups)), hooks_(groups_.size()), local_(model.parameters().size()) {
    const auto& params = model.parameters();
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      GradientSource source{.tensors = {}, .set_grad_ready_hook = [this, g](nn::GPT::GradReadyHook hook) {
                              hooks_[g] = std::move(hook);
                            }};
      for (int i : groups_[g].indices) {
        local_[static_cast<std::size_t>(i)] = {static_cast<int>(g), static_cast<int>(source.tensors.size())};
        source.tensors.push_back(params[static_cast<std::size_t>(i)].tensor);
      }
      tensors_.push_back(source.tensors);
      // (A group of one rank has nothing to average: its gradients are only scaled.)
      averagers_.push_back(groups_[g].group->size() == 1
                               ? nullptr
                               : make_gradient_averager(kind, std::move(source), *groups_[g].group, bucket_bytes, wire));
    }
    model_.set_grad_ready_hook([this](std::span<const int> ready) { on_ready(ready); });
  }
  ~AveragerByRole() override {
    model_.set_grad_ready_hook({});
    averagers_.clear();  // (each sets its group's hook to none here)
  }
  AveragerByRole(const AveragerByRole&) = delete;
  AveragerByRole& operator=(const AveragerByRole&) = delete;

  void before_backward(bool communicate) override {
    for (auto& a : averagers_)
      if (a) a->before_backward(communicate);
  }
  void finish() override {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      if (averagers_[g]) averagers_[g]->finish();
      scale_gradients(tensors_[g], groups_[g].summed);
    }
  }
  std::string describe() const override {
    const auto described = [this](std::size_t g) {
      return averagers_[g] ? averagers_[g]->describe() : std::string("one rank: nothing to average");
    };
    if (groups_.size() == 1) return described(0);
    std::vector<std::string> parts;
    for (std::size_t g = 0; g < groups_.size(); ++g)
      parts.push_back(fmt::format("{} tensor(s) over {} rank(s){}: {}", groups_[g].indices.size(),
                                  groups_[g].group->size(),
                                  groups_[g].summed > 1 ? fmt::format(", then × 1/{}", groups_[g].summed) : "",
                                  described(g)));
    return fmt::format("{}", fmt::join(parts, "; "));
  }
  void on_bucket_done(BucketSeen seen) override {
    for (auto& a : averagers_)
      if (a) a->on_bucket_done(seen);
  }

 private:
  void on_ready(std::span<const int> ready) {
    std::vector<std::vector<int>> by_group(groups_.size());
    for (int i : ready) {
      const auto [g, local] = local_[static_cast<std::size_t>(i)];
      by_group[static_cast<std::size_t>(g)].push_back(local);
    }
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (!by_group[g].empty() && hooks_[g]) hooks_[g](by_group[g]);
  }

  nn::GPT& model_;
  std::vector<RoleGroup> groups_;
  std::vector<nn::GPT::GradReadyHook> hooks_;  // each group's averager's hook
  std::vector<std::pair<int, int>> local_;     // model index → (group, index in it)
  std::vector<std::vector<nn::Tensor>> tensors_;
  std::vector<std::unique_ptr<GradientAverager>> averagers_;
};

}  // namespace

void average_gradients_by_role(std::vector<nn::NamedTensor>& parameters, Grid& grid, GradientWire wire) {
  for (const RoleGroup& g : role_groups(parameters, grid)) {
    std::vector<nn::NamedTensor> mine;
    std::vector<nn::Tensor> tensors;
    for (int i : g.indices) {
      mine.push_back(parameters[static_cast<std::size_t>(i)]);
      tensors.push_back(mine.back().tensor);
    }
    if (g.group->size() > 1) average_gradients(mine, *g.group, wire);
    scale_gradients(tensors, g.summed);
  }
}

std::unique_ptr<GradientAverager> make_averager_by_role(DdpKind kind, nn::GPT& model, Grid& grid,
                                                        std::size_t bucket_bytes, GradientWire wire) {
  std::vector<RoleGroup> groups = role_groups(model.parameters(), grid);
  const bool any = std::any_of(groups.begin(), groups.end(), [](const RoleGroup& g) { return g.group->size() > 1; });
  if (!any) return nullptr;
  return std::make_unique<AveragerByRole>(kind, model, std::move(groups), bucket_bytes, wire);
}

void broadcast_state_by_role(std::vector<nn::NamedTensor>& parameters, nn::AdamW* optimizer, Grid& grid) {
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    comm::Communicator& group = grid.replicas_of(parameters[i].role);
    if (group.size() == 1) continue;
    group.broadcast(parameters[i].tensor.values(), 0);
    if (!optimizer) continue;
    group.broadcast(optimizer->exp_avg()[i].values(), 0);
    group.broadcast(optimizer->exp_avg_sq()[i].values(), 0);
  }
  if (!optimizer || grid.dp_group.size() == 1) return;
  std::array<int64_t, 1> steps{optimizer->steps()};
  grid.dp_group.broadcast(std::span<int64_t>(steps), 0);  // (every rank's optimizer counts the same steps)
  optimizer->set_steps(steps[0]);
}

}  // namespace parallel
