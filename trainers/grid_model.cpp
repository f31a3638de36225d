#include "trainers/grid_model.hpp"

#include <array>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "parallel/dp/replicas.hpp"
#include "nn/checkpoint.hpp"
#include "nn/grad_clip.hpp"
#include "nn/memory_estimate.hpp"
#include "parallel/checkpoint.hpp"
#include "parallel/pp/inference.hpp"
#include "parallel/pp/stage.hpp"
#include "parallel/pp/tied_embedding.hpp"
#include "parallel/cp/context_parallel_layers.hpp"
#include "parallel/ep/tensor_parallel_folding.hpp"
#include "parallel/tp/tensor_parallel_layers.hpp"
#include "parallel/dp/gradient_averaging.hpp"
#include "parallel/dp/replicas_by_role.hpp"

namespace trainers {

parallel::LayoutJob layout_job(const TrainOptions& o, const nn::GPTConfig& config, int world_size) {
  const nn::ComputeModes modes = compute_modes(o);
  return {.model = config,
          .world_size = world_size,
          .replica_batch = o.batch_size,
          .precision = modes.precision,
          .attention = modes.attention};
}

// ---- the model piece ------------------------------------------------------------------------

GridModel::Pieces GridModel::build_pieces(parallel::Grid& grid, const GridShape& shape,
                                          const nn::GPTConfig& config, const LayerFaults& faults) {
  Pieces p;
  p.tensor = parallel::make_tensor_parallel(config, grid.tp_group, shape.sequence_parallel);
  p.context = parallel::with_context_parallel(p.tensor ? p.tensor : std::make_shared<nn::WholeSequence>(),
                                              grid.cp_group, shape.cp_attention, shape.cp_overlap,
                                              faults.skip_ring_at_step);
  if (config.n_experts == 0) return p;
  p.experts = parallel::with_expert_parallel(grid.ep_group, faults.skip_dispatch_at_step);
  if (grid.tp > 1)  // the tp ranks folded into the experts' group: each sends its share of the rows
    p.dispatcher = std::make_shared<parallel::TensorParallelFolding>(p.experts, grid.tp_group);
  return p;
}

nn::GPTLayers GridModel::Pieces::layers() const {
  nn::GPTLayers l{.weights = tensor, .sequence = tensor, .dispatcher = experts};
  if (dispatcher) l.dispatcher = dispatcher;
  if (context) l.sequence = context;
  return l;
}

GridModel::GridModel(comm::Communicator& world, const GridShape& shape, const nn::GPTConfig& config, uint64_t seed,
                     const nn::ComputeModes& modes, const LayerFaults& faults)
    : grid(parallel::Grid::make(world, shape)),
      layers(shape.chunk_layers(config.n_layer)),
      pieces_(build_pieces(grid, shape, config, faults)),
      model_(config, seed, parallel::stage_part(layers, grid.pp_rank, grid.pp), modes, pieces_.layers()) {}

void GridModel::begin_step(int64_t step) {
  if (pieces_.context) pieces_.context->begin_step(step);
  if (pieces_.experts) pieces_.experts->begin_step(step);
}

nn::RoutingStats& GridModel::routing_stats() {
  nn::RoutingStats& stats = model_.routing_stats();
  if (grid.tp_rank != 0) {  // every tp rank routes the same tokens (the experts folded): tp rank 0 counts them
    const double seconds = stats.dispatch_seconds;
    stats.clear();
    stats.dispatch_seconds = seconds;
  }
  if (pieces_.experts) stats.dispatch_seconds += pieces_.experts->take_dispatch_seconds();
  return stats;
}

void GridModel::load(const std::filesystem::path& dir, nn::AdamW* optimizer, comm::Communicator& world) {
  std::optional<nn::GPT> whole;
  std::optional<nn::AdamW> whole_optimizer;
  if (world.rank() == 0) {
    whole.emplace(model_.config(), 0);
    whole_optimizer.emplace(whole->parameters(), optimizer ? optimizer->config() : nn::AdamWConfig{});
  }
  on_rank0_then_agree(world, [&] { nn::load_checkpoint(dir, *whole, optimizer ? &*whole_optimizer : nullptr); });
  if (grid.in_first_copy())
    parallel::distribute_checkpoint(model_, optimizer, grid, whole ? &*whole : nullptr,
                                    whole_optimizer ? &*whole_optimizer : nullptr);
  broadcast_over_replicas(optimizer);
}

void GridModel::save(const std::filesystem::path& dir, nn::AdamW& optimizer, const nlohmann::json& train_state,
                     nn::CheckpointWriter& writer) {
  if (grid.in_first_copy()) parallel::save_checkpoint(dir, model_, optimizer, train_state, grid, writer);
}

void GridModel::broadcast_over_replicas(nn::AdamW* optimizer) {
  std::vector<nn::NamedTensor> pieces = parameters();
  parallel::broadcast_state_by_role(pieces, optimizer, grid);  // each over the ranks holding its copy
}

BatchLoss GridModel::batch_loss() {
  return [this](std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T) {
    return parallel::pipeline_loss(model_, grid.pp_group, ids, targets, B, T);
  };
}

std::string GridModel::sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t stream) {
  nn::Rng rng(stream_seed(o.seed, Stream::sample, stream));
  return vocabulary.decode(parallel::pipeline_generate(model_, grid.pp_group, vocabulary.encode(o.prompt),
                                                       o.sample_tokens, o.temperature, o.top_k, rng));
}

float GridModel::global_grad_norm() {
  double squares = model_.squared_grad_norm();  // this stage's, the same on its tp ranks
  if (grid.pp > 1) grid.pp_group.allreduce(std::span<double>(&squares, 1));
  return static_cast<float>(std::sqrt(squares));
}

float GridModel::finish_gradients(float max_norm, parallel::GradientWire wire, parallel::GradientAverager* averager) {
  std::vector<nn::NamedTensor> pieces = parameters();
  // Averaging over dp first: it is linear, so it commutes with the two sums below, and the
  // overlapped averager has sent most of it during backward already.
  if (averager)
    averager->finish();
  else  // each over the ranks holding its copy: dp × cp (the mean over replicas and each sequence's positions), experts apart
    parallel::average_gradients_by_role(pieces, grid, wire);
  model_.sum_replicated_grads();                              // sequence parallelism: each rank's positions' share
  parallel::sum_tied_embedding_grads(model_, grid.pp_group);  // the first and last stage's copies
  const float norm = global_grad_norm();
  if (max_norm > 0.0f && std::isfinite(norm)) nn::clip_to_norm(pieces, max_norm, norm);
  return norm;
}

// ---- --eval-only and --sample-only ------------------------------------------------------------

namespace {

class LoadedGrid final : public LoadedModel {
 public:
  LoadedGrid(const GridShape& shape, const TrainOptions& o, const Start& start, comm::Communicator& world)
      : grid_model_(world, shape, start.config, 0, compute_modes(o)) {
    grid_model_.load(o.init_from, nullptr, world);
  }
  double full_loss(std::span<const int32_t> tokens) override {
    EvalMode eval(grid_model_.model());
    return full_split_loss(grid_model_.batch_loss(), tokens, grid_model_.model().config().block_size,
                           grid_model_.grid.dp_group, grid_model_.grid.forwards_across_replicas());
  }
  std::string sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t stream) override {
    // The first replica samples (with its ep group, which runs the same forwards); it answers.
    if (!grid_model_.grid.in_first_copy()) return "";
    const std::string text = grid_model_.sample(vocabulary, o, stream);
    return grid_model_.grid.first_replica() ? text : "";
  }

 private:
  GridModel grid_model_;
};

}  // namespace

std::unique_ptr<LoadedModel> load_grid_model(const GridShape& shape, const TrainOptions& o, const Start& start,
                                             comm::Communicator& world) {
  parallel::LayoutJob job = layout_job(o, start.config, world.size());
  job.replica_batch = 0;  // no training batch to cut into micro-batches
  shape.check(job);
  return std::make_unique<LoadedGrid>(shape, o, start, world);
}

// ---- the grid trainers' shared strategy -------------------------------------------------------

GridStrategy::GridStrategy(const RunStart& run, comm::Communicator& world, const GridShape& shape, uint64_t seed,
                           const LayerFaults& faults)
    : run_(run),
      o_(run.options),
      world_(world),
      shape_(shape),
      grid_model_(world, shape, run.start.config, seed, compute_modes(run.options), faults) {
  if (shape.zero == 0) {
    optimizer_ = std::make_unique<nn::AdamW>(grid_model_.parameters(), run.options.adamw);
    if (!run.load_from.empty())
      grid_model_.load(run.load_from, o_.resume ? optimizer_.get() : nullptr, world);
    else
      grid_model_.broadcast_over_replicas(optimizer_.get());  // the same start on every replica
  } else {
    // ZeRO: the whole state only while it is handed out (a resume's); then each rank keeps its shards.
    zero_ = std::make_unique<parallel::ZeroByRole>(shape.zero, grid_model_.model(), run.options.adamw, grid_,
                                                   run.options.grad_comm);
    std::unique_ptr<nn::AdamW> whole;
    if (o_.resume && !run.load_from.empty())
      whole = std::make_unique<nn::AdamW>(grid_model_.parameters(), run.options.adamw);
    if (!run.load_from.empty())
      grid_model_.load(run.load_from, whole.get(), world);
    else
      grid_model_.broadcast_over_replicas(nullptr);
    zero_->start(whole.get());
  }
  verify_tied_copies();
}

StrategyFacts::MemoryFormula GridStrategy::zero_memory_formula() const {
  if (!zero_) return {};
  const parallel::HeldBytes f = zero_->formula();
  return {fmt::format("ZeRO-{}", shape_.zero), f.parameters + f.gradients + f.optimizer};
}

std::vector<std::pair<std::string, const comm::Communicator*>> GridStrategy::grid_groups() const {
  std::vector<std::pair<std::string, const comm::Communicator*>> groups = {{"tp", &grid_.tp_group}};
  if (grid_.cp > 1) groups.emplace_back("cp", &grid_.cp_group);
  groups.emplace_back("pp", &grid_.pp_group);
  groups.emplace_back("dp", &grid_.dp_group);
  if (run_.start.config.n_experts > 0 && grid_.ep_group.size() > 1) {  // the dispatch's all-to-alls (tp folded in); the experts' gradients
    groups.emplace_back("ep", &grid_.ep_group);
    groups.emplace_back("expert dp", &grid_.expert_dp_group);
  }
  return groups;
}

void GridStrategy::optimizer_step(float lr) {
  if (zero_) return zero_->step(lr);
  optimizer_->step(lr);
  optimizer_->zero_grad();
}

parallel::HeldBytes GridStrategy::held() const {
  if (zero_) return zero_->held();
  parallel::HeldBytes h = parallel::held_by_tensors(grid_model_.parameters());
  h.optimizer = 2 * h.parameters;  // AdamW's two moments of every parameter this rank holds
  return h;
}

std::pair<float, float> GridStrategy::evaluate(int64_t step) {
  EvalMode eval(grid_model_.model());
  return estimate_train_val(grid_model_.batch_loss(), run_.data, o_, T(), grid_.dp_rank, step, grid_.dp_group);
}

double GridStrategy::full_val_loss() {
  EvalMode eval(grid_model_.model());
  return full_split_loss(grid_model_.batch_loss(), run_.data.val, T(), grid_.dp_group, grid_.forwards_across_replicas());
}

void GridStrategy::print_sample(int64_t step) {
  // The first replica samples (with its ep group, which runs the same forwards); the others go on.
  if (o_.sample_tokens == 0 || !grid_.in_first_copy()) return;
  const std::string text = grid_model_.sample(run_.data.vocabulary, o_, static_cast<uint64_t>(step));
  say_sample(step, text, world_);
}

void GridStrategy::save(const std::filesystem::path& dir, const nlohmann::json& train_state,
                        nn::CheckpointWriter& writer) {
  if (!zero_) return grid_model_.save(dir, *optimizer_, train_state, writer);
  // ZeRO: the first copy's ranks (each group's rank 0) gather their piece's moments, then save as always.
  std::unique_ptr<nn::AdamW> whole;
  if (grid_.in_first_copy()) whole = std::make_unique<nn::AdamW>(grid_model_.parameters(), o_.adamw);
  zero_->gather_optimizer(whole.get());
  if (whole) grid_model_.save(dir, *whole, train_state, writer);
}

void GridStrategy::verify_tied_copies() {
  if (!o_.check) return;
  parallel::verify_tied_embedding(grid_model_.model(), grid_.pp_group);
}

void GridStrategy::at_end() { verify_tied_copies(); }

}  // namespace trainers
