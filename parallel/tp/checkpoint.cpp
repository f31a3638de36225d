#include "parallel/tp/checkpoint.hpp"

#include <array>
#include <optional>
#include <vector>

#include "parallel/pp/checkpoint.hpp"

namespace parallel {
namespace {

// Parameter i's slices in the order they travel: values, then (with an optimizer) the moments.
std::vector<std::span<float>> slices_of(TensorParallelGPT& model, nn::AdamW* optimizer, std::size_t i) {
  std::vector<std::span<float>> t = {model.parameters()[i].tensor.values()};  // slices()[i]'s tensor
  if (optimizer) {
    t.push_back(optimizer->exp_avg()[i].values());
    t.push_back(optimizer->exp_avg_sq()[i].values());
  }
  return t;
}

// The stage's whole parameters (and an optimizer for its moments), on tp rank 0 only.
struct WholeStage {
  std::optional<nn::GPT> model;
  std::optional<nn::AdamW> optimizer;
  WholeStage(const TensorParallelGPT& tp_model, const nn::AdamWConfig& config, bool here) {
    if (!here) return;
    model.emplace(tp_model.config(), 0, tp_model.part());
    optimizer.emplace(model->parameters(), config);
  }
};

}  // namespace

void save_tensor_parallel_checkpoint(const std::filesystem::path& dir, TensorParallelGPT& model, nn::AdamW& optimizer,
                                     const nlohmann::json& train_state, Grid& grid, nn::CheckpointWriter& writer) {
  const bool gatherer = grid.tp_rank == 0;
  WholeStage stage(model, optimizer.config(), gatherer);
  for (std::size_t i = 0; i < model.slices().size(); ++i) {
    const TpParameter& p = model.slices()[i];
    const auto mine = slices_of(model, &optimizer, i);
    for (std::size_t k = 0; k < mine.size(); ++k) {
      const std::vector<float> whole = model.gather(p, mine[k]);
      if (gatherer) std::ranges::copy(whole, tensors_of(*stage.model, &*stage.optimizer, p.name)[k].begin());
    }
  }
  if (!gatherer) return;
  stage.optimizer->set_steps(optimizer.steps());
  save_pipeline_checkpoint(dir, *stage.model, *stage.optimizer, train_state, grid.pp_group, writer);
}

void distribute_tensor_parallel_checkpoint(TensorParallelGPT& model, nn::AdamW* optimizer, Grid& grid, nn::GPT* whole,
                                           nn::AdamW* whole_optimizer) {
  const bool root = grid.tp_rank == 0;
  WholeStage stage(model, optimizer ? optimizer->config() : nn::AdamWConfig{}, root);
  nn::AdamW* stage_optimizer = optimizer && root ? &*stage.optimizer : nullptr;
  if (root) distribute_pipeline_checkpoint(*stage.model, stage_optimizer, grid.pp_group, whole, whole_optimizer);
  for (std::size_t i = 0; i < model.slices().size(); ++i) {
    const TpParameter& p = model.slices()[i];
    const auto mine = slices_of(model, optimizer, i);
    for (std::size_t k = 0; k < mine.size(); ++k) {
      std::vector<float> full(static_cast<std::size_t>(nn::numel_of(p.full_shape)));
      if (root) std::ranges::copy(tensors_of(*stage.model, stage_optimizer, p.name)[k], full.begin());
      grid.tp_group.broadcast(std::span(full), 0);
      std::ranges::copy(model.shard_of(p, full), mine[k].begin());
    }
  }
  if (!optimizer) return;
  std::array<int64_t, 1> steps{root ? stage.optimizer->steps() : 0};
  grid.tp_group.broadcast(std::span<int64_t>(steps), 0);
  optimizer->set_steps(steps[0]);
}

}  // namespace parallel
