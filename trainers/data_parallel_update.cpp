#include "trainers/data_parallel_update.hpp"

#include <fmt/format.h>

#include "parallel/dp/replicas.hpp"
#include "nn/checkpoint.hpp"
#include "nn/grad_clip.hpp"
#include "nn/memory_estimate.hpp"
#include "parallel/dp/gradient_wire.hpp"
#include "parallel/dp/gradient_averaging.hpp"
#include "trainers/run_setup.hpp"

namespace trainers {
namespace {

namespace fs = std::filesystem;

// Rank 0 loads (or keeps its initialisation), every rank takes its parameters.
void load_on_rank0(const fs::path& checkpoint, nn::GPT& model, nn::AdamW* optimizer, comm::Communicator& world) {
  if (!checkpoint.empty()) on_rank0_then_agree(world, [&] { nn::load_checkpoint(checkpoint, model, optimizer); });
}

class ReplicatedUpdate : public DataParallelUpdate {
 public:
  ReplicatedUpdate(const TrainOptions& o, nn::GPT& model, comm::Communicator& world)
      : model_(model),
        world_(world),
        check_(o.check),
        optimizer_(model.parameters(), o.adamw),
        averager_(parallel::make_gradient_averager(o.ddp, parallel::GradientSource::of(model), world, static_cast<std::size_t>(o.bucket_mb * 1e6),
                                         o.grad_comm)) {}

  void start(const fs::path& checkpoint, bool with_optimizer) override {
    load_on_rank0(checkpoint, model_, with_optimizer ? &optimizer_ : nullptr, world_);
    parallel::broadcast_state(model_, &optimizer_, world_);
    if (check_) parallel::verify_identical(model_, world_);
  }
  void before_backward(bool last) override { averager_->before_backward(last); }
  void finish_gradients() override { averager_->finish(); }
  float clip_grad_norm(float max_norm) override { return nn::clip_grad_norm(model_.parameters(), max_norm); }
  void step(float lr) override {
    optimizer_.step(lr);
    optimizer_.zero_grad();
  }
  void with_full_parameters(const std::function<void()>& work) override { work(); }
  void save(const fs::path& dir, const nlohmann::json& state, nn::CheckpointWriter& writer) override {
    if (world_.rank() == 0) writer.save(dir, model_, optimizer_, state);
  }
  bool save_alone(const fs::path& dir, const nlohmann::json& state) override {
    nn::save_checkpoint(dir, model_, optimizer_, state);
    return true;
  }
  parallel::HeldBytes held() const override {
    parallel::HeldBytes h = parallel::held_by_tensors(model_.parameters());
    h.optimizer = 2 * h.parameters;  // AdamW's two moments of every parameter
    return h;
  }
  std::string describe() const override { return averager_->describe(); }
  void on_bucket_done(parallel::GradientAverager::BucketSeen seen) override {
    averager_->on_bucket_done(std::move(seen));
  }

 private:
  nn::GPT& model_;
  comm::Communicator& world_;
  bool check_;  // check mode: the replicas verified identical after the start
  nn::AdamW optimizer_;
  std::unique_ptr<parallel::GradientAverager> averager_;
};

class ShardedUpdate : public DataParallelUpdate {
 public:
  ShardedUpdate(const TrainOptions& o, nn::GPT& model, comm::Communicator& world)
      : model_(model),
        world_(world),
        check_(o.check),
        adamw_(o.adamw),
        zero_(o.zero, model, o.adamw, world, o.grad_comm) {}

  void start(const fs::path& checkpoint, bool with_optimizer) override {
    // The whole AdamW state exists for a moment on rank 0 only, to be scattered in shards.
    std::unique_ptr<nn::AdamW> full;
    if (world_.rank() == 0 && with_optimizer) full = std::make_unique<nn::AdamW>(model_.parameters(), adamw_);
    load_on_rank0(checkpoint, model_, full.get(), world_);
    parallel::broadcast_state(model_, nullptr, world_);
    if (check_) parallel::verify_identical(model_, world_);
    zero_.start(full.get());
  }
  void before_backward(bool last) override { zero_.before_backward(last); }
  void finish_gradients() override { zero_.finish_gradients(); }
  float clip_grad_norm(float max_norm) override { return zero_.clip_grad_norm(max_norm); }
  void step(float lr) override {
    zero_.step(lr);
    zero_.zero_grad();
  }
  void with_full_parameters(const std::function<void()>& work) override { zero_.with_full_parameters(work); }
  void save(const fs::path& dir, const nlohmann::json& state, nn::CheckpointWriter& writer) override {
    zero_.with_full_parameters([&] {
      std::unique_ptr<nn::AdamW> full = zero_.gather_optimizer();  // gathered on rank 0 for the write
      if (full) writer.save(dir, model_, *full, state);  // a snapshot: `full` may go
    });
  }
  parallel::HeldBytes held() const override { return zero_.held(); }
  std::string describe() const override { return zero_.describe(); }

 private:
  nn::GPT& model_;
  comm::Communicator& world_;
  bool check_;  // check mode: the replicas verified identical after the start
  nn::AdamWConfig adamw_;
  parallel::ZeroOptimizer zero_;
};

}  // namespace

std::unique_ptr<DataParallelUpdate> make_data_parallel_update(const TrainOptions& o, nn::GPT& model,
                                                              comm::Communicator& world) {
  if (o.zero == 0) return std::make_unique<ReplicatedUpdate>(o, model, world);
  return std::make_unique<ShardedUpdate>(o, model, world);
}

StrategyFacts::MemoryFormula zero_memory_formula(const TrainOptions& o, const nn::GPT& model, int ranks) {
  const auto P = static_cast<double>(model.num_params(false));
  return {fmt::format("ZeRO-{}", o.zero), parallel::zero_formula_bytes(o.zero, P, ranks)};
}

TrafficFormula zero_traffic_formula(const TrainOptions& o, const nn::GPT& model, int ranks) {
  const auto P = static_cast<double>(model.num_params(false));
  const auto gradient_bytes = static_cast<int>(comm::size_of(parallel::element_type(o.grad_comm)));
  return {parallel::zero_traffic(o.zero, P, o.grad_accum).bytes(gradient_bytes) * (ranks - 1) / ranks,
          fmt::format("{} ranks, {} micro-step(s), Ψ = {:.2f}M, gradients {}", ranks, o.grad_accum, P / 1e6,
                      parallel::name_of(o.grad_comm))};
}

}  // namespace trainers
