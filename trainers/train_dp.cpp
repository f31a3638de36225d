// train_dp: data-parallel training of a GPT on tiny Shakespeare.
//
//   mpiexec -n 2 build/trainers/train_dp            # the main job: train, evaluate, sample
//
// Data parallelism, the lecture's picture, and where each step happens below:
//
//   1. same start      rank 0 initialises (or loads) the model; broadcast_state() copies
//                      parameters (and optimizer moments) to every rank
//   2. unique data     BatchSampler: every rank a different micro-batch at every step
//   3. average grads   GradientAverager (naive, or bucketed and overlapped with backward)
//   4. same update     every rank clips and steps AdamW on identical averaged gradients,
//                      so the replicas stay identical without ever sending parameters again
//
// --zero 1|2|3 shards what each rank keeps instead (parallel/zero_optimizer.hpp): steps 3
// and 4 become a reduce-scatter of the gradients, AdamW on this rank's shard, and an
// all-gather of the parameters. trainers/data_parallel_update.hpp holds both ways.
//
// Rank 0 prints, writes the metrics file and the checkpoints; every rank computes.
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <optional>

#include <fmt/format.h>

#include "comm/cli_checks.hpp"
#include "comm/runtime.hpp"
#include "nn/autograd.hpp"
#include "nn/checkpoint.hpp"
#include "nn/data.hpp"
#include "nn/error.hpp"
#include "nn/gemm.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/ops.hpp"
#include "nn/threads.hpp"
#include "trainers/batches.hpp"
#include "trainers/evaluation.hpp"
#include "trainers/data_parallel_update.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/step_traffic.hpp"
#include "trainers/trace.hpp"
#include "trainers/training_log.hpp"
#include "trainers/train_options.hpp"

namespace {

using namespace trainers;  // the shared parts: run_setup.hpp, training_log.hpp, evaluation.hpp, trace.hpp

// ---- evaluation and samples -------------------------------------------------------------

struct Evaluation {
  float train_loss, val_loss;
};

Evaluation evaluate(nn::GPT& model, const Splits& data, const TrainOptions& o, int64_t step,
                    comm::Communicator& world) {
  const auto r = static_cast<uint64_t>(world.rank()), s = static_cast<uint64_t>(step);
  return {trainers::estimate_loss(model, data.train, o.batch_size, o.eval_iters,
                                  stream_seed(o.seed, Stream::eval, r, 2 * s), world),
          trainers::estimate_loss(model, data.val, o.batch_size, o.eval_iters,
                                  stream_seed(o.seed, Stream::eval, r, 2 * s + 1), world)};
}

void print_sample(nn::GPT& model, const nn::CharVocabulary& vocabulary, const TrainOptions& o, int64_t step,
                  comm::Communicator& world) {
  if (world.rank() != 0 || o.sample_tokens == 0) return;  // the other ranks do not wait for it
  const std::string text = trainers::sample_text(model, vocabulary, o.prompt, o.sample_tokens, o.temperature, o.top_k,
                                                 stream_seed(o.seed, Stream::sample, static_cast<uint64_t>(step)));
  comm::say("---- sample at step {} ----\n{}\n----", step, text);
}

// ---- the modes ---------------------------------------------------------------------------

void eval_only(const TrainOptions& o, comm::Communicator& world) {
  const Start start = read_start(o, o.init_from, world);
  const Splits data = load_data(o, world);
  check_vocabulary(start.train_state, data.vocabulary, data.dir);
  check_fits(data, start.config.block_size);
  check_memory(start.config, 32, /*training=*/false, world);  // full_split_loss runs 32 windows at a time
  nn::GPT model(start.config, 0);
  on_rank0_then_agree(world, [&] { nn::load_checkpoint(o.init_from, model, nullptr); });
  broadcast_state(model, nullptr, world);
  const auto t0 = Clock::now();
  const double loss = trainers::full_split_loss(model, data.val, world);
  if (!std::isfinite(loss))
    throw comm::UsageError(fmt::format("the val loss of {} is {}: the model is diverged", o.init_from, loss));
  comm::say("exact loss over the {} val tokens in windows of {} ({:.1f} s, {} ranks)", data.val.size(),
            start.config.block_size, seconds_since(t0), world.size());
  comm::say("val_loss_full={:.6f}", loss);
}

void sample_only(const TrainOptions& o, comm::Communicator& world) {
  const Start start = read_start(o, o.init_from, world);
  check_memory(start.config, 1, /*training=*/false, world);
  nn::GPT model(start.config, 0);
  on_rank0_then_agree(world, [&] { nn::load_checkpoint(o.init_from, model, nullptr); });
  try {
    const nn::CharVocabulary vocabulary(start.train_state.at("vocabulary").get<std::string>());
    check_prompt(o.prompt, vocabulary);
    if (world.rank() == 0)
      comm::say("{}", trainers::sample_text(model, vocabulary, o.prompt, o.sample_tokens, o.temperature, o.top_k,
                                            stream_seed(o.seed, Stream::sample, 0)));
  } catch (const std::exception& e) {
    throw comm::UsageError(fmt::format("--sample-only: {}", e.what()));
  }
}

// ---- memory, measured and by formula ------------------------------------------------------

// After the first step, one line per rank: what it holds by kind (counted from the tensors
// that have memory), the step's peak from the allocator (nn::BufferPool), and ZeRO's formula;
// then what the step sent, counted by the communicator, beside the formula.
class FirstStepReport {
 public:
  FirstStepReport(int stage, double parameters, int ranks, int micro_steps)
      : stage_(stage), parameters_(parameters), ranks_(ranks), micro_steps_(micro_steps) {}
  void step_begins(const comm::Communicator& world) {
    nn::BufferPool::reset_peak();
    at_start_ = static_cast<double>(nn::BufferPool::bytes_in_use());
    traffic_at_start_ = world.traffic();
  }
  void gradients_held(const parallel::HeldBytes& held) { held_ = held; }  // just before the optimizer step
  void report(comm::Communicator& world) const {
    const comm::TrafficByKind step = world.traffic() - traffic_at_start_;  // before this report's own allgather
    const double peak = static_cast<double>(nn::BufferPool::peak_bytes_in_use());
    const std::array<double, 5> mine{held_.parameters, held_.gradients, held_.optimizer, peak, peak - at_start_};
    std::vector<double> all(mine.size() * static_cast<std::size_t>(world.size()));
    world.allgather(std::span<const double>(mine), std::span(all));
    if (world.rank() != 0) return;
    for (int r = 0; r < world.size(); ++r) {
      const double* m = all.data() + r * mine.size();
      comm::say(
          "memory rank {} (allocator): parameters {}, gradients {}, optimizer {} = {} (ZeRO-{} formula {}); "
          "step peak {}, {} above the step's start (activations, buffers)",
          r, nn::format_bytes(m[0]), nn::format_bytes(m[1]), nn::format_bytes(m[2]),
          nn::format_bytes(m[0] + m[1] + m[2]), stage_,
          nn::format_bytes(zero_formula_bytes(stage_, parameters_, ranks_)), nn::format_bytes(m[3]),
          nn::format_bytes(m[4]));
    }
    comm::say(
        "communication in the step: {} → each rank sends ≈ {:.1f} MB (formula {:.1f} MB: {} ranks, {} micro-step(s), "
        "Ψ = {:.2f}M)",
        comm::describe(step), comm::bytes_sent_per_rank(step, ranks_) / 1e6,
        zero_traffic_elements(stage_, parameters_, micro_steps_) * 4 * (ranks_ - 1) / ranks_ / 1e6, ranks_,
        micro_steps_, parameters_ / 1e6);
  }

 private:
  int stage_;
  double parameters_;
  int ranks_, micro_steps_;
  double at_start_ = 0;
  comm::TrafficByKind traffic_at_start_{};
  parallel::HeldBytes held_;
};

// ---- training ----------------------------------------------------------------------------

void train(TrainOptions& options, comm::Communicator& world) {
  const RunStart run = begin_run(options, world);
  const TrainOptions& o = run.o;
  const Splits& data = run.data;
  const int rank = world.rank(), N = world.size();
  const nn::GPTConfig& config = run.start.config;
  const int T = config.block_size, B = o.batch_size, K = o.grad_accum;
  check_memory(config, B, /*training=*/true, world, o.zero);

  // 1. The same start. Every rank builds a model, each from a different seed — so without
  //    the broadcast the replicas would differ — and rank 0's parameters are copied to all.
  nn::GPT model(config, stream_seed(o.seed, Stream::init, static_cast<uint64_t>(rank)));
  auto update = make_data_parallel_update(o, model, world);
  const int64_t first_step = run.first_step();
  update->start(run.load_from, o.resume);

  BatchSampler sampler(data.train, T, B, K, o.sampling == "partition" ? Sampling::partition : Sampling::random, o.seed,
                       rank, N);
  const StepBatch step_batch{N, static_cast<int64_t>(N) * B * K};
  const int64_t tokens_per_step = step_batch.sequences * T;
  TrainingLog log(o, world, first_step, tokens_per_step, model.flops_per_token(T), run.checkpoint_dir);

  comm::say("train_dp: {} ranks × {} compute thread(s), GEMM {}, backend {}, {}", N, nn::compute_threads(),
            nn::gemm_library(), world.backend_name(), update->describe());
  comm::say("model: {} layers, {} heads, {} wide, block {}, vocab {}: {:.2f}M parameters", config.n_layer,
            config.n_head, config.n_embd, T, config.vocab_size, static_cast<double>(model.num_params()) / 1e6);
  comm::say("data: {} train / {} val tokens in {}, {}; {} sampling", data.train.size(), data.val.size(),
            data.dir.string(), data.origin, o.sampling);
  comm::say("global batch: {} ranks × micro-batch {} × {} accumulation step(s) × block {} = {} tokens per step", N, B,
            K, T, tokens_per_step);
  say_run_notes(run, N, step_batch);

  std::optional<Evaluation> last_eval;
  auto save = [&](int64_t steps_done) {
    update->save(run.checkpoint_dir, train_state(run, steps_done, N, step_batch,
                                                 last_eval ? std::optional(last_eval->val_loss) : std::nullopt));
    log.saved(steps_done);
  };
  auto evaluate_and_sample = [&](int64_t step, bool sample) {  // with every parameter present (ZeRO-3 gathers them)
    update->with_full_parameters([&] {
      last_eval = evaluate(model, data, o, step, world);
      log.evaluation(step, last_eval->train_loss, last_eval->val_loss);
      if (sample) print_sample(model, data.vocabulary, o, step, world);
    });
  };
  FirstStepReport first_step_report(o.zero, static_cast<double>(model.num_params(false)), N, K);
  StepTraffic traffic({{"world", &world}});

  const nn::LrSchedule schedule = lr_schedule(o);
  log.update_interrupt_note(first_step);
  Trace trace(world);  // --trace: spans of the first --trace-steps steps
  auto span = [&](const std::string& name, const char* cat, Clock::time_point start) {
    const double end = Trace::now_s();
    trace.add(name, cat, end - seconds_since(start), end);
  };
  Batch batch;
  for (int64_t step = first_step; step < o.max_iters; ++step) {
    if (step == o.crash_at_step && rank == o.crash_rank) std::raise(SIGKILL);  // as `kill -9` would
    trace.on = !o.trace.empty() && step < first_step + o.trace_steps;
    if (o.eval_interval > 0 && step > first_step && step % o.eval_interval == 0) {
      const auto t0 = Clock::now();
      evaluate_and_sample(step, true);
      log.exclude(seconds_since(t0));  // kept out of the ETA and the throughput
    }
    PhaseTimes& window = log.window();
    const float lr = schedule.at(static_cast<int>(step));
    const auto step_start = Clock::now();
    traffic.step_began();
    first_step_report.step_begins(world);
    float step_loss = 0.0f;
    for (int micro = 0; micro < K; ++micro) {
      // 2. Unique data: this rank's micro-batch.
      auto t = Clock::now();
      sampler.fill(step, micro, batch);
      model.dropout_rng() = nn::Rng(
          stream_seed(o.seed, Stream::dropout, static_cast<uint64_t>(rank), static_cast<uint64_t>(step * K + micro)));
      window.data += seconds_since(t);

      t = Clock::now();
      nn::Tensor loss = model.loss(batch.ids, batch.targets, B, T);
      step_loss += loss.item() / static_cast<float>(K);
      if (K > 1)
        loss = nn::scale(loss, 1.0f / static_cast<float>(K));  // the step's gradient is the mean over micro-steps
      window.forward += seconds_since(t);
      span(fmt::format("F{}", micro), "forward", t);

      // 3a. Backward; on the last micro-step the bucketed averager starts allreduces from inside it.
      t = Clock::now();
      update->before_backward(micro == K - 1);
      nn::autograd::backward(loss);
      window.backward += seconds_since(t);
      span(fmt::format("B{}", micro), "backward", t);
    }
    // 3b. Every gradient averaged over the ranks (the part of communication not hidden by overlap).
    auto t = Clock::now();
    update->finish_gradients();
    window.comm += seconds_since(t);
    span("grad sync", "comm", t);
    first_step_report.gradients_held(update->held());

    // 4. The same update everywhere.
    t = Clock::now();
    const float norm = update->clip_grad_norm(o.grad_clip);
    log.check_finite(step + 1, "gradient norm", norm);  // the same on every rank: computed from averaged gradients
    update->step(lr);
    window.optimizer += seconds_since(t);
    span("AdamW", "optimizer", t);
    window.total += seconds_since(step_start);
    ++window.steps;
    traffic.step_ended();

    const int64_t done = step + 1;
    if (done == first_step + 1) first_step_report.report(world);
    if (log.due(done)) {
      std::array<float, 1> loss_avg{step_loss};
      world.allreduce(std::span<float>(loss_avg), comm::ReduceOp::avg);  // the logged loss: mean over ranks
      log.line(done, loss_avg[0], lr, norm);
    }
    if (o.ckpt_interval > 0 && done % o.ckpt_interval == 0 && done != o.max_iters) save(done);
    log.update_interrupt_note(done);
    if (!o.trace.empty() && done == first_step + o.trace_steps) {
      std::vector<std::string> rows;
      for (int r = 0; r < N; ++r) rows.push_back(fmt::format("rank {}", r));
      trace.write(o.trace, rows);
      comm::say("trace of steps {}-{} in {} (scripts/plot_trace.py draws it)", first_step + 1, done, o.trace);
    }
  }

  // The end: evaluate, the exact val loss, a checkpoint, a sample.
  const int64_t end = std::max<int64_t>(o.max_iters, first_step);
  evaluate_and_sample(end, false);
  save(end);
  update->with_full_parameters([&] {
    if (o.final_full_val) log.final_loss(end, full_split_loss(model, data.val, world));
    comm::say("communication per training step, rank 0: {}", traffic.per_step());
    comm::say("trained {} steps in {:.1f} s; checkpoint in {}, metrics in {}", end - first_step, log.elapsed(),
              run.checkpoint_dir.string(), o.metrics);
    print_sample(model, data.vocabulary, o, end, world);
  });
}

}  // namespace

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{"train_dp: data-parallel GPT training on tiny Shakespeare (mpiexec -n N train_dp)"};
    comm::Options comm_options;
    comm::add_options(app, comm_options);
    TrainOptions options;
    trainers::add_train_options(app, options);
    app.add_option("--zero", options.zero,
                   "ZeRO stage: 0 replicated, 1 optimizer state, 2 + gradients, 3 + parameters sharded over the ranks")
        ->check(comm::cli::whole(0, 3))
        ->capture_default_str();
    options.layout_flags = {"--zero"};
    comm::parse(app, argc, argv);
    trainers::finish_train_options(app, options);
    options.program = argv[0];
    comm::Communicator& world = trainers::start_trainer(runtime, comm_options, options);
    if (options.eval_only)
      eval_only(options, world);
    else if (options.sample_only)
      sample_only(options, world);
    else
      train(options, world);
  });
}
