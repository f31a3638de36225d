// train_dp: data-parallel training of a GPT on tiny Shakespeare.
//
//   mpiexec -n 2 build/trainers/train_dp            # the main job: train, evaluate, sample
//
// Data parallelism, the lecture's picture, and where each step happens below:
//
//   1. same start      rank 0 initialises (or loads) the model; the update broadcasts its
//                      parameters (and optimizer moments) to every rank
//   2. unique data     BatchSampler: every rank a different micro-batch at every step
//   3. average grads   GradientAverager (naive, or bucketed and overlapped with backward)
//   4. same update     every rank clips and steps AdamW on identical averaged gradients,
//                      so the replicas stay identical without ever sending parameters again
//
// --zero 1|2|3 shards what each rank keeps instead (parallel/zero_optimizer.hpp): steps 3
// and 4 become a reduce-scatter of the gradients, AdamW on this rank's shard, and an
// all-gather of the parameters. trainers/data_parallel_update.hpp holds both ways; the loop
// around the step is trainers/training_loop.hpp, the same for every trainer.
#include <array>
#include <memory>

#include <fmt/format.h>

#include "comm/cli_checks.hpp"
#include "nn/autograd.hpp"
#include "nn/checkpoint.hpp"
#include "nn/gemm.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/ops.hpp"
#include "nn/threads.hpp"
#include "trainers/batches.hpp"
#include "trainers/data_parallel_update.hpp"
#include "trainers/evaluation.hpp"
#include "trainers/trainer_main.hpp"

namespace {

using namespace trainers;

class DataParallel final : public Strategy {
 public:
  DataParallel(const RunStart& run, comm::Communicator& world)
      : o_(run.o),
        data_(run.data),
        world_(world),
        // 1. The same start. Every rank builds a model, each from a different seed — so without
        //    the broadcast in start() the replicas would differ — and rank 0's is copied to all.
        model_(run.start.config, stream_seed(o_.seed, Stream::init, static_cast<uint64_t>(world.rank()))),
        update_(make_data_parallel_update(o_, model_, world)),
        sampler_(data_.train, T(), o_.batch_size, o_.grad_accum, sampling_of(o_.sampling), o_.seed, world.rank(),
                 world.size()) {
    update_->start(run.load_from, o_.resume);
  }

  void say_layout() const override {
    const nn::GPTConfig& c = model_.config();
    comm::say("train_dp: {} ranks × {} compute thread(s), GEMM {}, backend {}, {}", world_.size(),
              nn::compute_threads(), nn::gemm_library(), world_.backend_name(), update_->describe());
    comm::say("model: {} layers, {} heads, {} wide, block {}, vocab {}: {:.2f}M parameters", c.n_layer, c.n_head,
              c.n_embd, c.block_size, c.vocab_size, static_cast<double>(model_.num_params()) / 1e6);
  }
  std::string batch_layout() const override {
    return fmt::format("{} ranks × micro-batch {} × {} accumulation step(s)", world_.size(), o_.batch_size,
                       o_.grad_accum);
  }
  StepBatch step_batch() const override {
    return {world_.size(), static_cast<int64_t>(world_.size()) * o_.batch_size * o_.grad_accum};
  }
  std::vector<std::pair<std::string, const comm::Communicator*>> groups() const override {
    return {{"world", &world_}};
  }
  std::vector<std::string> trace_rows() const override {
    std::vector<std::string> rows;
    for (int r = 0; r < world_.size(); ++r) rows.push_back(fmt::format("rank {}", r));
    return rows;
  }

  void forward_backward(int64_t step, StepClock& clock) override {
    const int K = o_.grad_accum;
    step_loss_ = 0;
    for (int micro = 0; micro < K; ++micro) {
      nn::Tensor loss;
      {  // 2. Unique data: this rank's micro-batch, and its own dropout.
        Timed data(clock, Phase::data, micro);
        sampler_.fill(step, micro, batch_);
        const auto stream = static_cast<uint64_t>(step * K + micro);
        model_.dropout_rng() = nn::Rng(stream_seed(o_.seed, Stream::dropout, rank(), stream));
      }
      {
        Timed forward(clock, Phase::forward, micro);
        loss = model_.loss(batch_.ids, batch_.targets, o_.batch_size, T());
        step_loss_ += loss.item() / static_cast<float>(K);
        if (K > 1) loss = nn::scale(loss, 1.0f / static_cast<float>(K));  // the step's gradient: the mean
      }
      {  // 3a. On the last micro-step the bucketed averager starts allreduces from inside backward.
        Timed backward(clock, Phase::backward, micro);
        update_->before_backward(micro == K - 1);
        nn::autograd::backward(loss);
      }
    }
  }
  float finish_gradients(float max_norm) override {
    update_->finish_gradients();  // 3b. what overlap did not hide
    return update_->clip_grad_norm(max_norm);
  }
  void optimizer_step(float lr) override { update_->step(lr); }  // 4. the same update everywhere
  float step_loss() override {
    std::array<float, 1> mean{step_loss_};
    world_.allreduce(std::span<float>(mean), comm::ReduceOp::avg);
    return mean[0];
  }
  parallel::HeldBytes held() const override { return update_->held(); }
  std::string memory_formula() const override {
    return fmt::format(" (ZeRO-{} formula {})", o_.zero,
                       nn::format_bytes(parallel::zero_formula_bytes(o_.zero, parameters(), world_.size())));
  }
  void after_first_step(const comm::TrafficByKind& sent) override {
    const int N = world_.size();
    comm::say(
        "communication in the step: {} → each rank sends ≈ {:.1f} MB (formula {:.1f} MB: {} ranks, {} micro-step(s), "
        "Ψ = {:.2f}M)",
        comm::describe(sent), comm::bytes_sent_per_rank(sent, N) / 1e6,
        parallel::zero_traffic_elements(o_.zero, parameters(), o_.grad_accum) * 4 * (N - 1) / N / 1e6, N, o_.grad_accum,
        parameters() / 1e6);
  }

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
  void print_sample(int64_t step) override {
    if (o_.sample_tokens == 0) return;
    update_->with_full_parameters([&] {
      if (world_.rank() == 0)  // the other ranks do not wait for it
        say_sample(step, sample(model_, data_.vocabulary, o_, static_cast<uint64_t>(step)), world_);
    });
  }
  void save(const std::filesystem::path& dir, const nlohmann::json& train_state) override {
    update_->save(dir, train_state);
  }

  static std::string sample(nn::GPT& model, const nn::CharVocabulary& vocabulary, const TrainOptions& o,
                            uint64_t stream) {
    return sample_text(model, vocabulary, o.prompt, o.sample_tokens, o.temperature, o.top_k,
                       stream_seed(o.seed, Stream::sample, stream));
  }

 private:
  int T() const { return model_.config().block_size; }
  uint64_t rank() const { return static_cast<uint64_t>(world_.rank()); }
  double parameters() const { return static_cast<double>(model_.num_params(false)); }

  const TrainOptions& o_;
  const Splits& data_;
  comm::Communicator& world_;
  nn::GPT model_;
  std::unique_ptr<DataParallelUpdate> update_;
  BatchSampler sampler_;
  Batch batch_;
  float step_loss_ = 0;  // this rank's, the mean over its micro-steps
};

// --eval-only and --sample-only: rank 0 loads the checkpoint; every rank evaluates a share.
std::unique_ptr<nn::GPT> load_for_inference(const TrainOptions& o, const Start& start, int batch,
                                            comm::Communicator& world) {
  check_memory(start.config, batch, /*training=*/false, world);
  auto model = std::make_unique<nn::GPT>(start.config, 0);
  on_rank0_then_agree(world, [&] { nn::load_checkpoint(o.init_from, *model, nullptr); });
  broadcast_state(*model, nullptr, world);
  return model;
}

void eval_only(const TrainOptions& o, comm::Communicator& world) {
  const EvalStart eval = read_eval_start(o, world);
  const auto model = load_for_inference(o, eval.start, 32, world);  // full_split_loss: 32 windows at a time
  const auto t0 = Clock::now();
  const double loss = full_split_loss(*model, eval.data.val, world);
  say_val_loss_full(o, eval, loss, seconds_since(t0), world.size());
}

void sample_only(const TrainOptions& o, comm::Communicator& world) {
  const Start start = read_start(o, o.init_from, world);
  const auto model = load_for_inference(o, start, 1, world);
  const nn::CharVocabulary vocabulary = sample_vocabulary(start, o);
  if (world.rank() == 0) comm::say("{}", DataParallel::sample(*model, vocabulary, o, 0));
}

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
  program.eval_only = eval_only;
  program.sample_only = sample_only;
  program.make_strategy = [](const RunStart& run, comm::Communicator& world) -> std::unique_ptr<Strategy> {
    check_memory(run.start.config, run.o.batch_size, /*training=*/true, world, run.o.zero);
    return std::make_unique<DataParallel>(run, world);
  };
  return run_trainer(argc, argv, program);
}
