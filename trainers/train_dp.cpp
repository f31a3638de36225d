// train_dp: data-parallel training of a GPT on tiny Shakespeare.
//
//   mpiexec -n 2 build/trainers/train_dp            # the main job: train, evaluate, sample
//
// Data parallelism, the lecture's picture, and where each step happens below:
//
//   1. same start      rank 0 initialises (or loads) the model; every rank gets its parameters
//                      (and optimizer moments) by broadcast
//   2. unique data     MicroSteps (its BatchSampler): every rank a different micro-batch at every step
//   3. average grads   parallel::GradientAverager (naive, or bucketed and overlapped with backward)
//   4. same update     every rank clips and steps AdamW on identical averaged gradients,
//                      so the replicas stay identical without ever sending parameters again
//
// --zero 1|2|3 shards what each rank keeps instead (parallel/dp/zero_optimizer.hpp): steps 3
// and 4 become a reduce-scatter of the gradients, AdamW on this rank's shard, and an
// all-gather of the parameters. trainers/data_parallel_update.hpp holds both ways; the loop
// around the step is trainers/training_loop.hpp, the same for every trainer.
#include <array>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/cli_checks.hpp"
#include "trainers/micro_steps.hpp"
#include "trainers/data_parallel_update.hpp"
#include "trainers/evaluation.hpp"
#include "trainers/trainer_main.hpp"

namespace {

using namespace trainers;

class DataParallel final : public Strategy {
 public:
  DataParallel(const RunStart& run, comm::Communicator& world)
      : o_(run.options),
        data_(run.data),
        world_(world),
        // 1. The same start. Every rank builds a model, each from a different seed — so without
        //    the broadcast in start() the replicas would differ — and rank 0's is copied to all.
        model_(run.start.config, stream_seed(o_.seed, Stream::init, static_cast<uint64_t>(world.rank())),
               compute_modes(o_)),
        update_(make_data_parallel_update(o_, model_, world)),
        micro_steps_(o_, data_.train, T(), world.rank(), world.size()) {
    update_->start(run.load_from, o_.resume);
    // --trace: each bucket's allreduce on the rank's second row, under the backward it overlaps.
    update_->on_bucket_done([this](int bucket, std::size_t bytes, std::int64_t start_ns, std::int64_t end_ns) {
      if (clock_)
        clock_->add_beside(fmt::format("bucket {} ({:.1f} MB)", bucket, static_cast<double>(bytes) / 1e6),
                           static_cast<double>(start_ns) / 1e9, static_cast<double>(end_ns) / 1e9);
    });
  }

  StrategyFacts facts() const override {
    const int N = world_.size();
    return {.layout = {fmt::format("train_dp: {} replicas, {}", N, update_->describe())},
            .batch_layout =
                fmt::format("{} ranks × micro-batch {} × {} accumulation step(s)", N, o_.batch_size, o_.grad_accum),
            .step_batch = {N, static_cast<int64_t>(N) * o_.batch_size * o_.grad_accum},
            .memory_formula = zero_memory_formula(o_, model_, N),
            .traffic_formula = zero_traffic_formula(o_, model_, N)};
  }

  // 2. Unique data: this rank's slice of the step's global batch (and its dropout masks). 3a. On
  //    the last micro-step the bucketed averager starts allreduces from inside backward.
  void forward_backward(int64_t step, StepClock& clock) override {
    clock_ = &clock;  // the step's: finish_gradients reports the buckets on it
    step_loss_ = micro_steps_.run(model_, step, clock, [this](bool last) { update_->before_backward(last); });
  }
  float finish_gradients(float max_norm) override {
    update_->finish_gradients();  // 3b. what overlap did not hide
    return update_->clip_grad_norm(max_norm);
  }
  void optimizer_step(float lr) override { update_->step(lr); }  // 4. the same update everywhere
  LogFacts log_facts() override { return {mean_over(world_, step_loss_), ""}; }
  nn::RoutingStats& routing_stats() override { return model_.routing_stats(); }
  parallel::HeldBytes held() const override { return update_->held(); }

  // Evaluation and samples with every parameter present (ZeRO-3 gathers them).
  std::pair<float, float> evaluate(int64_t step) override {
    std::pair<float, float> losses;
    update_->with_full_parameters([&] {
      EvalMode eval(model_);
      losses = estimate_train_val(loss_of(model_), data_, o_, T(), world_.rank(), step, world_);
    });
    return losses;
  }
  double full_val_loss() override {
    double loss = 0;
    update_->with_full_parameters([&] { loss = full_split_loss(model_, data_.val, world_); });
    return loss;
  }
  void print_sample(int64_t step) override {  // rank 0 samples; the others do not wait for it
    if (o_.sample_tokens == 0) return;
    update_->with_full_parameters([&] {
      if (world_.rank() == 0) say_sample(step, sample_text(model_, data_.vocabulary, o_, uint64_t(step)), world_);
    });
  }
  void save(const std::filesystem::path& dir, const nlohmann::json& state, nn::CheckpointWriter& writer) override {
    update_->save(dir, state, writer);
  }
  bool save_alone(const std::filesystem::path& dir, const nlohmann::json& state) override {
    return update_->save_alone(dir, state);
  }

 private:
  int T() const { return model_.config().block_size; }
  uint64_t rank() const { return static_cast<uint64_t>(world_.rank()); }

  const TrainOptions& o_;
  const Splits& data_;
  comm::Communicator& world_;
  nn::GPT model_;
  std::unique_ptr<DataParallelUpdate> update_;
  MicroSteps micro_steps_;
  float step_loss_ = 0;  // this rank's, the mean over its micro-steps
  StepClock* clock_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  Program program{"train_dp: data-parallel GPT training on tiny Shakespeare (mpiexec -n N train_dp)"};
  program.add_flags = [](CLI::App& app, TrainOptions& options) {
    app.add_option("--zero", options.zero,
                   "ZeRO stage: 0 replicated, 1 optimizer state, 2 + gradients, 3 + parameters sharded over the ranks")
        ->check(comm::cli::whole(0, 3))
        ->capture_default_str();
  };
  program.layout_flags = {"--zero"};
  // Every rank a replica: the layout is dp = N (and ZeRO's stage).
  const auto layout = [](const TrainOptions& o, int ranks) { return parallel::Layout{.dp = ranks, .zero = o.zero}; };
  program.layout_query = [&](const TrainOptions& o, int from) { return accumulating_layout_query(layout(o, from), o); };
  program.make_strategy = [&](const RunStart& run, comm::Communicator& world) -> std::unique_ptr<Strategy> {
    layout(run.options, world.size()).check(
        {.model = run.start.config, .world_size = world.size(), .precision = compute_modes(run.options).precision});
    check_memory(run.start.config, run.options.batch_size, /*training=*/true, world, run.options.zero);
    return std::make_unique<DataParallel>(run, world);
  };
  return run_trainer(argc, argv, program);
}
