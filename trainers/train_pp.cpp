// train_pp: pipeline-parallel training of a GPT on tiny Shakespeare (× data parallelism).
//
//   mpiexec -n 4 build/trainers/train_pp --n-layer 4 --schedule 1f1b --micro-batches 8
//   mpiexec -n 4 build/trainers/train_pp --dp 2 --n-layer 4        # 2 pipelines of 2 stages
//
// The model's blocks are split over the P = world / dp stages of a pipeline (layers split
// "vertically"): stage 0 owns the embedding, the last stage the head and the loss. Each step,
// the per-replica batch is cut into M micro-batches that flow through the pipeline; a
// schedule (parallel/pp_gpipe.cpp, parallel/pp_1f1b.cpp) orders their forwards and backwards.
// Then, per step:
//   1. the tied embedding's two copies (first and last stage) sum their gradients
//   2. each stage's gradients are averaged over the dp replicas of that stage
//   3. the global gradient norm is summed over the stages, clipped, and AdamW steps
// Everything else — data, evaluation, samples, checkpoints, logs — is the shared trainer parts
// (trainers/run_setup.hpp, training_log.hpp, evaluation.hpp); checkpoints are one whole
// nanoGPT-named model.safetensors, so train_dp and PyTorch load them.
#include <array>
#include <cmath>
#include <csignal>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/cli_checks.hpp"
#include "comm/runtime.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/checkpoint.hpp"
#include "nn/error.hpp"
#include "nn/gemm.hpp"
#include "nn/grad_clip.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/threads.hpp"
#include "parallel/grid.hpp"
#include "parallel/pp_checkpoint.hpp"
#include "parallel/pp_inference.hpp"
#include "parallel/pp_schedule.hpp"
#include "parallel/tied_embedding.hpp"
#include "trainers/batches.hpp"
#include "trainers/evaluation.hpp"
#include "trainers/gradient_averaging.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/step_memory.hpp"
#include "trainers/step_traffic.hpp"
#include "trainers/trace.hpp"
#include "trainers/training_log.hpp"

namespace {

using namespace trainers;

struct PipelineOptions {
  std::string schedule = "1f1b";
  int micro_batches = 4;
  std::vector<int> stage_layers;  // empty: even
  int dp = 1;
  int skip_send_at_step = -1;  // testing: rank --crash-rank skips its sends at this step
};

// Everything a rank holds: its place in the grid, its stage's piece of the model.
struct Pipeline {
  parallel::Grid grid;
  std::vector<int> layers;  // blocks per stage
  nn::GPT model;
  parallel::GptStage stage_model{model};  // what the pipeline code sees of it

  Pipeline(comm::Communicator& world, const PipelineOptions& p, const nn::GPTConfig& config, uint64_t seed)
      : grid(parallel::Grid::make(world, p.dp, world.size() / p.dp, 1)),
        layers(parallel::stage_layers(config.n_layer, grid.pp, p.stage_layers)),
        model(config, seed, parallel::stage_part(layers, grid.pp_rank)) {}

  bool first() const { return grid.pp_rank == 0; }
  bool last() const { return grid.pp_rank == grid.pp - 1; }

  // Loads a checkpoint (the whole model, read on world rank 0) into every stage of every replica.
  void load(const std::filesystem::path& dir, nn::AdamW* optimizer, comm::Communicator& world) {
    std::optional<nn::GPT> whole;
    std::optional<nn::AdamW> whole_optimizer;
    if (world.rank() == 0) {
      whole.emplace(model.config(), 0);
      whole_optimizer.emplace(whole->parameters(), optimizer ? optimizer->config() : nn::AdamWConfig{});
    }
    on_rank0_then_agree(world, [&] { nn::load_checkpoint(dir, *whole, optimizer ? &*whole_optimizer : nullptr); });
    if (grid.dp_rank == 0)
      parallel::distribute_pipeline_checkpoint(model, optimizer, grid.pp_group, whole ? &*whole : nullptr,
                                               whole_optimizer ? &*whole_optimizer : nullptr);
  }

  // The loss of a batch through the pipeline, the same on every rank of it.
  BatchLoss batch_loss() {
    return [this](std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T) {
      return parallel::pipeline_loss(stage_model, grid.pp_group, ids, targets, B, T);
    };
  }

  std::string sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t seed) {
    nn::Rng rng(seed);
    return vocabulary.decode(parallel::pipeline_generate(stage_model, grid.pp_group, vocabulary.encode(o.prompt),
                                                         o.sample_tokens, o.temperature, o.top_k, rng));
  }
};

// Squared gradient norm of this stage, counting the tied embedding once (on the first stage).
double stage_squared_norm(Pipeline& pipe) {
  double sum = 0;
  for (auto& p : pipe.model.parameters()) {
    if (p.name == "transformer.wte.weight" && !pipe.first()) continue;  // the last stage's copy
    std::vector<nn::NamedTensor> one = {p};
    sum += nn::squared_grad_norm(one);
  }
  return sum;
}

void print_sample(Pipeline& pipe, const nn::CharVocabulary& vocabulary, const TrainOptions& o, int64_t step,
                  comm::Communicator& world) {
  if (o.sample_tokens == 0 || pipe.grid.dp_rank != 0) return;  // the first pipeline samples; the others go on
  const std::string text = pipe.sample(vocabulary, o, stream_seed(o.seed, Stream::sample, static_cast<uint64_t>(step)));
  if (world.rank() == 0) comm::say("---- sample at step {} ----\n{}\n----", step, text);
}

// ---- the modes ---------------------------------------------------------------------------

void check_replicas(const PipelineOptions& p, comm::Communicator& world) {
  if (world.size() % p.dp != 0)
    throw comm::UsageError(
        fmt::format("--dp {} does not divide the world size {}: run D × P ranks", p.dp, world.size()));
}

void eval_only(const TrainOptions& o, const PipelineOptions& p, comm::Communicator& world) {
  const Start start = read_start(o, o.init_from, world);
  const Splits data = load_data(o, world);
  check_vocabulary(start.train_state, data.vocabulary, data.dir);
  check_fits(data, start.config.block_size);
  Pipeline pipe(world, p, start.config, 0);
  pipe.load(o.init_from, nullptr, world);
  broadcast_state(pipe.model, nullptr, pipe.grid.dp_group);
  EvalMode eval(pipe.model);
  const double loss = full_split_loss(pipe.batch_loss(), data.val, start.config.block_size, pipe.grid.dp_group);
  comm::say("val_loss_full={:.6f}", loss);
}

void sample_only(const TrainOptions& o, const PipelineOptions& p, comm::Communicator& world) {
  const Start start = read_start(o, o.init_from, world);
  Pipeline pipe(world, p, start.config, 0);
  pipe.load(o.init_from, nullptr, world);
  try {
    const nn::CharVocabulary vocabulary(start.train_state.at("vocabulary").get<std::string>());
    check_prompt(o.prompt, vocabulary);
    if (pipe.grid.dp_rank == 0) {
      const std::string text = pipe.sample(vocabulary, o, stream_seed(o.seed, Stream::sample, 0));
      if (world.rank() == 0) comm::say("{}", text);
    }
  } catch (const nn::Error& e) {
    throw comm::UsageError(fmt::format("--sample-only: {}", e.what()));
  }
}

// ---- training ----------------------------------------------------------------------------

void train(TrainOptions& options, const PipelineOptions& p, comm::Communicator& world) {
  const RunStart run = begin_run(options, world);  // on --resume, p holds the checkpoint's layout now
  check_layout(run, [&] { check_replicas(p, world); });
  const TrainOptions& o = run.o;
  const Splits& data = run.data;
  const nn::GPTConfig& config = run.start.config;
  const int T = config.block_size, B = o.batch_size, M = p.micro_batches, N = world.size();
  if (B % M != 0) throw comm::UsageError(fmt::format("--micro-batches {} does not divide --batch-size {}", M, B));
  if (o.grad_accum != 1) throw comm::UsageError("train_pp: use --micro-batches instead of --grad-accum");
  check_memory(config, B, /*training=*/true, world);

  // The same start: dp replica 0 builds every stage from the run's seed (each stage keeps the
  // whole model's numbers for its part); the other replicas from other seeds, then broadcast.
  const int rank = world.rank();
  Pipeline pipe(world, p, config, stream_seed(o.seed, Stream::init, 0) + static_cast<uint64_t>(rank / (N / p.dp)));
  parallel::Grid& grid = pipe.grid;
  nn::GPT& model = pipe.model;
  nn::AdamW optimizer(model.parameters(), o.adamw);
  const int64_t first_step = run.first_step();
  if (!run.load_from.empty()) pipe.load(run.load_from, o.resume ? &optimizer : nullptr, world);
  broadcast_state(model, &optimizer, grid.dp_group);
  if (comm::runtime().options().check) {
    verify_identical(model, grid.dp_group);
    parallel::verify_tied_embedding(model, grid.pp_group);
  }

  BatchSampler sampler(data.train, T, B, 1, o.sampling == "partition" ? Sampling::partition : Sampling::random, o.seed,
                       grid.dp_rank, grid.dp);
  auto averager = make_gradient_averager(o.ddp, model, grid.dp_group, static_cast<std::size_t>(o.bucket_mb * 1e6));
  parallel::PipelineStage stage(pipe.stage_model, grid.pp_group, M, B / M, T);
  const StepBatch step_batch{grid.dp, static_cast<int64_t>(grid.dp) * B};
  const int64_t tokens_per_step = step_batch.sequences * T;
  // FLOPs per token of the whole model (every stage's work adds up to it).
  TrainingLog log(o, world, first_step, tokens_per_step, nn::flops_per_token(config, T), run.checkpoint_dir);

  comm::say("train_pp: {} ranks = {} pipeline(s) × {} stages, schedule {}, {} micro-batches of {}; GEMM {}, backend {}",
            N, grid.dp, grid.pp, p.schedule, M, B / M, nn::gemm_library(), world.backend_name());
  comm::say("layout: {}", grid.layout(N));
  comm::say(
      "stages: {} blocks each (stage 0 + embedding, stage {} + head); model {} layers, {} heads, {} wide, "
      "block {}, vocab {}",
      fmt::join(pipe.layers, "/"), grid.pp - 1, config.n_layer, config.n_head, config.n_embd, T, config.vocab_size);
  comm::say("data: {} train / {} val tokens in {}, {}; {} sampling", data.train.size(), data.val.size(),
            data.dir.string(), data.origin, o.sampling);
  comm::say("global batch: {} pipeline(s) × {} micro-batches × {} × block {} = {} tokens per step", grid.dp, M, B / M,
            T, tokens_per_step);
  say_run_notes(run, N, step_batch);

  // --trace: spans of the first --trace-steps steps.
  Trace trace(world);
  stage.on_span = [&](const std::string& name, const char* cat, double start, double end) {
    trace.add(name, cat, start, end);
  };

  std::optional<float> last_val;
  auto save = [&](int64_t steps_done) {
    if (grid.dp_rank == 0)
      parallel::save_pipeline_checkpoint(run.checkpoint_dir, model, optimizer,
                                         train_state(run, steps_done, N, step_batch, last_val), grid.pp_group);
    log.saved(steps_done);
  };
  auto evaluate = [&](int64_t step) {
    const auto t0 = Clock::now();
    EvalMode eval(model);
    const auto r = static_cast<uint64_t>(grid.dp_rank), s = static_cast<uint64_t>(step);
    const float train_loss = estimate_loss(pipe.batch_loss(), data.train, B, T, o.eval_iters,
                                           stream_seed(o.seed, Stream::eval, r, 2 * s), grid.dp_group);
    const float val_loss = estimate_loss(pipe.batch_loss(), data.val, B, T, o.eval_iters,
                                         stream_seed(o.seed, Stream::eval, r, 2 * s + 1), grid.dp_group);
    last_val = val_loss;
    log.evaluation(step, train_loss, val_loss);
    return seconds_since(t0);
  };

  // The bubble and the activations, summed over the steps since the last log line.
  parallel::StageTimes window_times;
  std::size_t window_peak_bytes = 0;
  int window_peak_in_flight = 0;

  StepTraffic traffic({{"pp", &grid.pp_group}, {"dp", &grid.dp_group}});
  StepMemory first_step_memory;  // reported after the first step
  const nn::LrSchedule schedule = lr_schedule(o);
  log.update_interrupt_note(first_step);
  Batch batch;
  for (int64_t step = first_step; step < o.max_iters; ++step) {
    if (step == o.crash_at_step && rank == o.crash_rank) std::raise(SIGKILL);  // as `kill -9` would
    trace.on = !o.trace.empty() && step < first_step + o.trace_steps;
    stage.skip_sends = step == p.skip_send_at_step && rank == o.crash_rank;
    if (o.eval_interval > 0 && step > first_step && step % o.eval_interval == 0) {
      const auto t0 = Clock::now();
      evaluate(step);
      print_sample(pipe, data.vocabulary, o, step, world);
      log.exclude(seconds_since(t0));
    }
    PhaseTimes& window = log.window();
    const float lr = schedule.at(static_cast<int>(step));
    const auto step_start = Clock::now();
    traffic.step_began();
    if (step == first_step) first_step_memory.step_begins();

    auto t = Clock::now();
    sampler.fill(step, 0, batch);  // this replica's batch; micro-batch m is rows [m·b, (m+1)·b)
    stage.set_batch(batch.ids, batch.targets);
    stage.before_forward = [&](int m) {
      model.dropout_rng() = nn::Rng(
          stream_seed(o.seed, Stream::dropout, static_cast<uint64_t>(rank), static_cast<uint64_t>(step * M + m)));
    };
    stage.before_backward = [&](int m) { averager->before_backward(m == M - 1); };
    window.data += seconds_since(t);

    // The schedule: forwards and backwards of the M micro-batches, activations passed along.
    nn::BufferPool::reset_peak();
    const std::size_t base_bytes = nn::BufferPool::bytes_in_use();
    stage.start_step();
    t = Clock::now();
    parallel::run_schedule(p.schedule, stage);
    window.forward += stage.times().forward;
    window.backward += stage.times().backward;
    window.comm += stage.times().wait;  // waiting for neighbours: the bubble (see its own line)
    window_times.forward += stage.times().forward;
    window_times.backward += stage.times().backward;
    window_times.wait += stage.times().wait;
    window_peak_bytes = std::max(window_peak_bytes, nn::BufferPool::peak_bytes_in_use() - base_bytes);
    window_peak_in_flight = std::max(window_peak_in_flight, stage.peak_in_flight());

    // 1-2. The tied embedding summed over first and last stage; gradients averaged over replicas.
    t = Clock::now();
    const double c0 = Trace::now_s();
    averager->finish();
    parallel::sum_tied_embedding_grads(model, grid.pp_group);
    window.comm += seconds_since(t);
    trace.add("grad sync", "comm", c0, Trace::now_s());

    // 3. The global norm: every stage's Σ g², summed over the pipeline.
    t = Clock::now();
    const double o0 = Trace::now_s();
    std::array<double, 1> squares{stage_squared_norm(pipe)};
    grid.pp_group.allreduce(std::span<double>(squares), comm::ReduceOp::sum);
    const auto norm = static_cast<float>(std::sqrt(squares[0]));
    log.check_finite(step + 1, "gradient norm", norm);
    nn::clip_to_norm(model.parameters(), o.grad_clip, norm);
    optimizer.step(lr);
    optimizer.zero_grad();
    window.optimizer += seconds_since(t);
    trace.add("AdamW", "optimizer", o0, Trace::now_s());
    window.total += seconds_since(step_start);
    ++window.steps;
    traffic.step_ended();
    if (step == first_step) first_step_memory.report(model.parameters(), world);

    const int64_t done = step + 1;
    if (log.due(done)) {
      // The loss is on the last stage: shared along the pipeline, averaged over the replicas.
      std::array<float, 1> loss{stage.loss()};
      grid.pp_group.broadcast(std::span<float>(loss), grid.pp - 1);
      grid.dp_group.allreduce(std::span<float>(loss), comm::ReduceOp::avg);
      log.line(done, loss[0], lr, norm);
      // Each stage's share of waiting, its peak activations and micro-batches in flight.
      std::array<double, 4> mine{window_times.wait / std::max(window_times.wait + window_times.compute(), 1e-12),
                                 static_cast<double>(window_peak_bytes), static_cast<double>(window_peak_in_flight), 0};
      std::vector<double> all(4 * static_cast<std::size_t>(grid.pp));
      grid.pp_group.allgather(std::span<const double>(mine), std::span<double>(all));
      std::vector<std::string> bubble, memory, flight;
      double mean = 0;
      for (int s = 0; s < grid.pp; ++s) {
        mean += all[4 * static_cast<std::size_t>(s)] / grid.pp;
        bubble.push_back(fmt::format("{:.0f}%", 100 * all[4 * static_cast<std::size_t>(s)]));
        memory.push_back(nn::format_bytes(all[4 * static_cast<std::size_t>(s) + 1]));
        flight.push_back(fmt::format("{:.0f}", all[4 * static_cast<std::size_t>(s) + 2]));
      }
      comm::say(
          "        bubble {:.0f}% measured (stages {}), {:.0f}% by the formula (p−1)/(m+p−1) | peak activations "
          "{} | micro-batches in flight ≤ {}",
          100 * mean, fmt::join(bubble, " "), 100.0 * (grid.pp - 1) / (M + grid.pp - 1), fmt::join(memory, " "),
          fmt::join(flight, " "));
      window_times = {};
      window_peak_bytes = 0;
      window_peak_in_flight = 0;
    }
    if (o.ckpt_interval > 0 && done % o.ckpt_interval == 0 && done != o.max_iters) save(done);
    log.update_interrupt_note(done);
    if (!o.trace.empty() && done == first_step + o.trace_steps) {
      trace.on = false;
      std::vector<std::string> rows;
      for (int r = 0; r < N; ++r)
        rows.push_back(grid.describe(r) + (r % grid.pp == 0 ? " (embedding)" : "") +
                       (r % grid.pp == grid.pp - 1 ? " (head)" : ""));
      trace.write(o.trace, rows);
      comm::say("trace of steps {}-{} in {} (scripts/plot_trace.py draws it)", first_step + 1, done, o.trace);
    }
  }

  const int64_t end = std::max<int64_t>(o.max_iters, first_step);
  evaluate(end);
  save(end);
  if (o.final_full_val) {
    EvalMode eval(model);
    log.final_loss(end, full_split_loss(pipe.batch_loss(), data.val, T, grid.dp_group));
  }
  if (comm::runtime().options().check) parallel::verify_tied_embedding(model, grid.pp_group);
  comm::say("communication per training step, rank 0: {}", traffic.per_step());
  comm::say("trained {} steps in {:.1f} s; checkpoint in {}, metrics in {}", end - first_step, log.elapsed(),
            run.checkpoint_dir.string(), o.metrics);
  print_sample(pipe, data.vocabulary, o, end, world);
}

}  // namespace

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{"train_pp: pipeline-parallel GPT training on tiny Shakespeare (mpiexec -n P·D train_pp --dp D)"};
    comm::Options comm_options;
    comm::add_options(app, comm_options);
    TrainOptions options;
    options.out_dir = "out/train_pp";
    options.model.n_layer = 4;  // enough blocks for 4 stages
    trainers::add_train_options(app, options);
    PipelineOptions p;
    app.add_option("--schedule", p.schedule, "pipeline schedule: gpipe (naive) or 1f1b")
        ->check(CLI::IsMember({"gpipe", "1f1b"}))
        ->capture_default_str();
    app.add_option("--micro-batches", p.micro_batches, "micro-batches M per step (must divide --batch-size)")
        ->check(comm::cli::whole(1))
        ->capture_default_str();
    app.add_option("--stage-layers", p.stage_layers, "blocks per stage, e.g. 3,2,2,1 (default: even)")->delimiter(',');
    app.add_option("--dp", p.dp, "data-parallel replicas of the pipeline (world = dp × stages)")
        ->check(comm::cli::whole(1))
        ->capture_default_str();
    app.add_option("--skip-send-at-step", p.skip_send_at_step,
                   "testing: rank --crash-rank skips its sends at this step")
        ->check(comm::cli::whole(0));
    options.layout_flags = {"--dp", "--stage-layers", "--schedule", "--micro-batches"};
    comm::parse(app, argc, argv);
    trainers::finish_train_options(app, options);
    options.program = argv[0];
    comm::Communicator& world = trainers::start_trainer(runtime, comm_options, options);
    if (!options.resume) check_replicas(p, world);  // a resumed run's --dp may come from its checkpoint
    if (options.eval_only)
      eval_only(options, p, world);
    else if (options.sample_only)
      sample_only(options, p, world);
    else
      train(options, p, world);
  });
}
