// train_3d: data × pipeline × tensor parallelism (the lecture's "3D parallelism") of a GPT on
// tiny Shakespeare.
//
//   mpiexec -n 8 build/trainers/train_3d --dp 2 --pp 2 --tp 2 --n-layer 4 --micro-batches 4
//   mpiexec -n 4 build/trainers/train_3d --pp 2 --tp 2 --sequence-parallel
//
// The ranks form a grid (parallel/grid.hpp), tp fastest. Each rank holds pipeline stage
// pp_rank's blocks, and of those, tp_rank's slice of every big matmul (parallel/tp_gpt.hpp).
// Each step:
//   1. the replica's batch (dp_rank's share of the global batch) is cut into M micro-batches
//      that flow through the pipeline under a schedule (gpipe or 1f1b, as in train_pp); every
//      stage's forward and backward run on its tp group (f/g all-reduces, or with
//      --sequence-parallel all-gathers and reduce-scatters)
//   2. gradients: the sequence-parallel replicated ones summed over tp, the tied embedding
//      over first and last stage, everything averaged over the dp replicas
//   3. the global norm summed over the pipeline (each element once), clipped, AdamW
// Data, evaluation, samples, checkpoints and logs are the shared trainer parts; the
// checkpoint is one whole nanoGPT-named model.safetensors (trainers/grid_model.hpp).
#include <array>
#include <csignal>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/cli_checks.hpp"
#include "comm/runtime.hpp"
#include "nn/gemm.hpp"
#include "nn/memory_estimate.hpp"
#include "parallel/pp_schedule.hpp"
#include "parallel/pp_stage.hpp"
#include "parallel/tied_embedding.hpp"
#include "trainers/batches.hpp"
#include "trainers/evaluation.hpp"
#include "trainers/grid_model.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/step_memory.hpp"
#include "trainers/trace.hpp"
#include "trainers/training_log.hpp"

namespace {

using namespace trainers;

struct ScheduleOptions {
  std::string schedule = "1f1b";
  int micro_batches = 4;
};

void train(TrainOptions& options, const GridShape& shape, const ScheduleOptions& s, comm::Communicator& world) {
  const RunStart run = begin_run(options, world);  // on --resume, shape and s hold the checkpoint's layout now
  const TrainOptions& o = run.o;
  const Splits& data = run.data;
  const nn::GPTConfig& config = run.start.config;
  const int T = config.block_size, B = o.batch_size, M = s.micro_batches, N = world.size();
  if (B % M != 0) throw comm::UsageError(fmt::format("--micro-batches {} does not divide --batch-size {}", M, B));
  if (o.grad_accum != 1) throw comm::UsageError("train_3d: use --micro-batches instead of --grad-accum");
  check_layout(run, [&] { check_grid(shape, config, N); });
  check_memory(config, B, /*training=*/true, world);

  const int rank = world.rank();
  GridModel g(world, shape, config, stream_seed(o.seed, Stream::init, 0));
  parallel::Grid& grid = g.grid;
  nn::AdamW optimizer(g.model.named_parameters(), o.adamw);
  const int64_t first_step = run.first_step();
  if (!run.load_from.empty()) g.load(run.load_from, o.resume ? &optimizer : nullptr, world);
  if (comm::runtime().options().check) parallel::verify_tied_embedding(g.model.tied_embedding(), grid.pp_group);

  BatchSampler sampler(data.train, T, B, 1, o.sampling == "partition" ? Sampling::partition : Sampling::random, o.seed,
                       grid.dp_rank, grid.dp);
  parallel::PipelineStage stage(g.model, grid.pp_group, M, B / M, T);
  const StepBatch step_batch{grid.dp, static_cast<int64_t>(grid.dp) * B};
  const int64_t tokens_per_step = step_batch.sequences * T;
  TrainingLog log(o, world, first_step, tokens_per_step, nn::flops_per_token(config, T), run.checkpoint_dir);

  comm::say("train_3d: {} ranks = dp {} × pp {} × tp {}{}, schedule {}, {} micro-batches of {}; GEMM {}, backend {}", N,
            grid.dp, grid.pp, grid.tp, shape.sequence_parallel ? " (sequence parallel)" : "", s.schedule, M, B / M,
            nn::gemm_library(), world.backend_name());
  comm::say("layout: {}", g.layout(N));
  comm::say(
      "stages: {} blocks each; each block's matmuls split over {} tp ranks ({} heads each); model {} layers, "
      "{} heads, {} wide, block {}, vocab {} (padded to {})",
      fmt::join(g.layers, "/"), grid.tp, config.n_head / grid.tp, config.n_layer, config.n_head, config.n_embd, T,
      config.vocab_size, g.model.padded_vocab());
  comm::say("data: {} train / {} val tokens in {}, {}; {} sampling", data.train.size(), data.val.size(),
            data.dir.string(), data.origin, o.sampling);
  comm::say("global batch: {} replica(s) × {} micro-batches × {} × block {} = {} tokens per step", grid.dp, M, B / M, T,
            tokens_per_step);
  say_run_notes(run, N, step_batch);

  Trace trace(world);
  stage.on_span = [&](const std::string& name, const char* cat, double start, double end) {
    trace.add(name, cat, start, end);
  };

  std::optional<float> last_val;
  auto save = [&](int64_t steps_done) {
    g.save(run.checkpoint_dir, optimizer, train_state(run, steps_done, N, step_batch, last_val));
    log.saved(steps_done);
  };
  auto evaluate = [&](int64_t step) {
    const auto [train_loss, val_loss] = g.estimate(data, o, step);
    last_val = val_loss;
    log.evaluation(step, train_loss, val_loss);
  };

  StepMemory first_step_memory;  // reported after the first step
  const nn::LrSchedule schedule = lr_schedule(o);
  log.update_interrupt_note(first_step);
  Batch batch;
  for (int64_t step = first_step; step < o.max_iters; ++step) {
    if (step == o.crash_at_step && rank == o.crash_rank) std::raise(SIGKILL);  // as `kill -9` would
    trace.on = !o.trace.empty() && step < first_step + o.trace_steps;
    if (o.eval_interval > 0 && step > first_step && step % o.eval_interval == 0) {
      const auto t0 = Clock::now();
      evaluate(step);
      g.print_sample(data.vocabulary, o, step, world);
      log.exclude(seconds_since(t0));
    }
    PhaseTimes& window = log.window();
    const float lr = schedule.at(static_cast<int>(step));
    const auto step_start = Clock::now();
    g.traffic.step_began();
    if (step == first_step) first_step_memory.step_begins();

    auto t = Clock::now();
    sampler.fill(step, 0, batch);  // this replica's batch, the same on all its stages and tp ranks
    stage.set_batch(batch.ids, batch.targets);
    stage.before_forward = [&](int m) {
      // Residual-stream masks shared by the tp group; each rank's own inside tp regions.
      const auto micro = static_cast<uint64_t>(step * M + m);
      g.model.set_dropout_seeds(
          stream_seed(o.seed, Stream::dropout, static_cast<uint64_t>(grid.dp_rank * grid.pp + grid.pp_rank), micro),
          stream_seed(o.seed, Stream::dropout, 1'000'000 + static_cast<uint64_t>(rank), micro));
    };
    window.data += seconds_since(t);

    // 1. The schedule: forwards and backwards of the M micro-batches through the stages.
    stage.start_step();
    t = Clock::now();
    parallel::run_schedule(s.schedule, stage);
    window.forward += stage.times().forward;
    window.backward += stage.times().backward;
    window.comm += stage.times().wait;  // waiting for pipeline neighbours (tp's collectives are inside compute)

    // 2-3. Gradients summed and averaged, the global norm, clipping, AdamW.
    t = Clock::now();
    const double c0 = Trace::now_s();
    const float norm = g.finish_gradients(o.grad_clip);
    log.check_finite(step + 1, "gradient norm", norm);
    window.comm += seconds_since(t);
    trace.add("grad sync + norm", "comm", c0, Trace::now_s());
    t = Clock::now();
    optimizer.step(lr);
    optimizer.zero_grad();
    window.optimizer += seconds_since(t);
    window.total += seconds_since(step_start);
    ++window.steps;
    g.traffic.step_ended();
    if (step == first_step) first_step_memory.report(g.model.named_parameters(), world);

    const int64_t done = step + 1;
    if (log.due(done)) {
      std::array<float, 1> loss{stage.loss()};  // on the last stage: shared along the pipeline, averaged over replicas
      grid.pp_group.broadcast(std::span<float>(loss), grid.pp - 1);
      grid.dp_group.allreduce(std::span<float>(loss), comm::ReduceOp::avg);
      log.line(done, loss[0], lr, norm);
    }
    if (o.ckpt_interval > 0 && done % o.ckpt_interval == 0 && done != o.max_iters) save(done);
    log.update_interrupt_note(done);
    if (!o.trace.empty() && done == first_step + o.trace_steps) {
      trace.on = false;
      std::vector<std::string> rows;
      for (int r = 0; r < N; ++r) rows.push_back(grid.describe(r));
      trace.write(o.trace, rows);
      comm::say("trace of steps {}-{} in {} (scripts/plot_trace.py draws it)", first_step + 1, done, o.trace);
    }
  }

  const int64_t end = std::max<int64_t>(o.max_iters, first_step);
  evaluate(end);
  save(end);
  if (o.final_full_val) {
    EvalMode eval(g.model);
    log.final_loss(end, full_split_loss(g.batch_loss(), data.val, T, grid.dp_group));
  }
  if (comm::runtime().options().check) parallel::verify_tied_embedding(g.model.tied_embedding(), grid.pp_group);
  comm::say("communication per training step, rank 0: {}", g.traffic.per_step());
  comm::say("trained {} steps in {:.1f} s; checkpoint in {}, metrics in {}", end - first_step, log.elapsed(),
            run.checkpoint_dir.string(), o.metrics);
  g.print_sample(data.vocabulary, o, end, world);
}

}  // namespace

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{
        "train_3d: data × pipeline × tensor parallel GPT training (mpiexec -n D·P·T train_3d --dp D --pp P --tp T)"};
    comm::Options comm_options;
    comm::add_options(app, comm_options);
    TrainOptions options;
    options.out_dir = "out/train_3d";
    options.model.n_layer = 4;  // enough blocks for 4 stages
    trainers::add_train_options(app, options);
    GridShape shape;
    ScheduleOptions s;
    app.add_option("--dp", shape.dp, "data-parallel replicas")->check(comm::cli::whole(1))->capture_default_str();
    app.add_option("--pp", shape.pp, "pipeline stages")->check(comm::cli::whole(1))->capture_default_str();
    app.add_option("--tp", shape.tp, "tensor-parallel ranks per stage (must divide n_head)")
        ->check(comm::cli::whole(1))
        ->capture_default_str();
    app.add_flag("--sequence-parallel", shape.sequence_parallel,
                 "shard layernorm and dropout along the sequence over the tp ranks (Megatron-SP)");
    app.add_option("--stage-layers", shape.stage_layers, "blocks per stage, e.g. 3,1 (default: even)")->delimiter(',');
    app.add_option("--schedule", s.schedule, "pipeline schedule: gpipe (naive) or 1f1b")
        ->check(CLI::IsMember({"gpipe", "1f1b"}))
        ->capture_default_str();
    app.add_option("--micro-batches", s.micro_batches, "micro-batches M per step (must divide --batch-size)")
        ->check(comm::cli::whole(1))
        ->capture_default_str();
    options.layout_flags = {"--dp",           "--pp",       "--tp",           "--sequence-parallel",
                            "--stage-layers", "--schedule", "--micro-batches"};
    comm::parse(app, argc, argv);
    trainers::finish_train_options(app, options);
    options.program = argv[0];
    comm::Communicator& world = trainers::start_trainer(runtime, comm_options, options);
    // Before any data is read; a resumed run's layout comes from its checkpoint (train checks it).
    if (!options.resume && world.size() != shape.dp * shape.pp * shape.tp)
      check_grid(shape, options.model, world.size());
    if (options.eval_only)
      grid_eval_only(options, shape, world);
    else if (options.sample_only)
      grid_sample_only(options, shape, world);
    else
      train(options, shape, s, world);
  });
}
