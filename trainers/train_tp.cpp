// train_tp: tensor-parallel training (Megatron-LM) of a GPT on tiny Shakespeare.
//
//   mpiexec -n 2 build/trainers/train_tp
//   mpiexec -n 4 build/trainers/train_tp --n-head 4 --sequence-parallel
//
// Every rank sees the same batch and holds 1/T of every big weight (parallel/tp_gpt.hpp):
// attention's q, k, v by whole heads and the MLP's first layer by columns (column-parallel),
// both output projections by rows (row-parallel), the embedding and the lm_head by vocabulary
// rows. Each block costs two all-reduces of its [B,T,C] activation forward (g, after each
// row-parallel layer) and two backward (f, before each column-parallel one); the loss three
// small ones (vocab-parallel cross-entropy). Each step:
//   1. forward and backward of the batch (× --grad-accum micro-steps), on the tp group
//   2. with --sequence-parallel, the replicated parameters' gradients summed over the group
//   3. the global norm (every element once), clipped, AdamW on this rank's slices
// Data, evaluation, samples, checkpoints and logs are the shared trainer parts; the
// checkpoint is one whole nanoGPT-named model.safetensors (trainers/grid_model.hpp).
#include <csignal>
#include <optional>

#include <fmt/format.h>

#include "comm/runtime.hpp"
#include "nn/gemm.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/ops.hpp"
#include "trainers/batches.hpp"
#include "trainers/grid_model.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/step_memory.hpp"
#include "trainers/trace.hpp"
#include "trainers/training_log.hpp"

namespace {

using namespace trainers;

void train(TrainOptions& options, const GridShape& shape, comm::Communicator& world) {
  const RunStart run = begin_run(options, world);
  const TrainOptions& o = run.o;
  const Splits& data = run.data;
  const nn::GPTConfig& config = run.start.config;
  const int T = config.block_size, B = o.batch_size, K = o.grad_accum, N = world.size();
  check_layout(run, [&] { check_grid(shape, config, N); });
  check_memory(config, B, /*training=*/true, world);

  const int rank = world.rank();
  GridModel g(world, shape, config, stream_seed(o.seed, Stream::init, 0));
  parallel::TensorParallelGPT& model = g.model;
  nn::AdamW optimizer(model.named_parameters(), o.adamw);
  const int64_t first_step = run.first_step();
  if (!run.load_from.empty()) g.load(run.load_from, o.resume ? &optimizer : nullptr, world);

  // One sampler for the whole group: every rank draws the same batch.
  BatchSampler sampler(data.train, T, B, K, o.sampling == "partition" ? Sampling::partition : Sampling::random, o.seed,
                       0, 1);
  const StepBatch step_batch{1, static_cast<int64_t>(K) * B};
  const int64_t tokens_per_step = step_batch.sequences * T;
  TrainingLog log(o, world, first_step, tokens_per_step, nn::flops_per_token(config, T), run.checkpoint_dir);

  comm::say("train_tp: {} tensor-parallel ranks{}; GEMM {}, backend {}", N,
            shape.sequence_parallel ? " with sequence parallelism" : "", nn::gemm_library(), world.backend_name());
  comm::say("split: {} of {} heads and {} of {} MLP columns per rank; vocabulary {} padded to {} ({} rows each)",
            config.n_head / N, config.n_head, 4 * config.n_embd / N, 4 * config.n_embd, config.vocab_size,
            model.padded_vocab(), model.padded_vocab() / N);
  comm::say("data: {} train / {} val tokens in {}, {}; {} sampling", data.train.size(), data.val.size(),
            data.dir.string(), data.origin, o.sampling);
  comm::say("batch: {} micro-step(s) × {} × block {} = {} tokens per step, the same on every rank", K, B, T,
            tokens_per_step);
  say_run_notes(run, N, step_batch);

  Trace trace(world);
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

    // 1. Forward and backward of each micro-step; the loss is the same on every rank.
    float loss_sum = 0;
    for (int micro = 0; micro < K; ++micro) {
      auto t = Clock::now();
      sampler.fill(step, micro, batch);
      const auto stream = static_cast<uint64_t>(step * K + micro);
      model.set_dropout_seeds(stream_seed(o.seed, Stream::dropout, 0, stream),
                              stream_seed(o.seed, Stream::dropout, 1'000'000 + static_cast<uint64_t>(rank), stream));
      window.data += seconds_since(t);
      t = Clock::now();
      const double f0 = Trace::now_s();
      nn::Tensor loss = nn::scale(model.loss(batch.ids, batch.targets, B, T), 1.0f / static_cast<float>(K));
      loss_sum += loss.item();
      window.forward += seconds_since(t);
      trace.add(fmt::format("forward {}", micro), "forward", f0, Trace::now_s());
      t = Clock::now();
      const double b0 = Trace::now_s();
      nn::autograd::backward(loss);
      window.backward += seconds_since(t);
      trace.add(fmt::format("backward {}", micro), "backward", b0, Trace::now_s());
    }

    // 2-3. Gradients completed, the global norm, clipping, AdamW.
    auto t = Clock::now();
    const float norm = g.finish_gradients(o.grad_clip);
    log.check_finite(step + 1, "gradient norm", norm);
    window.comm += seconds_since(t);
    t = Clock::now();
    const double o0 = Trace::now_s();
    optimizer.step(lr);
    optimizer.zero_grad();
    window.optimizer += seconds_since(t);
    trace.add("AdamW", "optimizer", o0, Trace::now_s());
    window.total += seconds_since(step_start);
    ++window.steps;
    g.traffic.step_ended();
    if (step == first_step) first_step_memory.report(model.named_parameters(), world);

    const int64_t done = step + 1;
    if (log.due(done)) log.line(done, loss_sum, lr, norm);
    if (o.ckpt_interval > 0 && done % o.ckpt_interval == 0 && done != o.max_iters) save(done);
    log.update_interrupt_note(done);
    if (!o.trace.empty() && done == first_step + o.trace_steps) {
      trace.on = false;
      std::vector<std::string> rows;
      for (int r = 0; r < N; ++r) rows.push_back(fmt::format("rank {} = tp {}", r, r));
      trace.write(o.trace, rows);
      comm::say("trace of steps {}-{} in {} (scripts/plot_trace.py draws it)", first_step + 1, done, o.trace);
    }
  }

  const int64_t end = std::max<int64_t>(o.max_iters, first_step);
  evaluate(end);
  save(end);
  if (o.final_full_val) {
    EvalMode eval(model);
    log.final_loss(end, full_split_loss(g.batch_loss(), data.val, T, g.grid.dp_group));
  }
  comm::say("communication per training step, rank 0: {}", g.traffic.per_step());
  comm::say("trained {} steps in {:.1f} s; checkpoint in {}, metrics in {}", end - first_step, log.elapsed(),
            run.checkpoint_dir.string(), o.metrics);
  g.print_sample(data.vocabulary, o, end, world);
}

}  // namespace

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{"train_tp: tensor-parallel GPT training on tiny Shakespeare (mpiexec -n T train_tp)"};
    comm::Options comm_options;
    comm::add_options(app, comm_options);
    TrainOptions options;
    options.out_dir = "out/train_tp";
    trainers::add_train_options(app, options);
    GridShape shape;
    app.add_flag("--sequence-parallel", shape.sequence_parallel,
                 "shard layernorm and dropout along the sequence over the ranks (Megatron-SP)");
    options.layout_flags = {"--sequence-parallel"};
    comm::parse(app, argc, argv);
    trainers::finish_train_options(app, options);
    options.program = argv[0];
    comm::Communicator& world = trainers::start_trainer(runtime, comm_options, options);
    shape.tp = world.size();  // tensor parallelism on its own: every rank in one tp group
    if (options.eval_only)
      grid_eval_only(options, shape, world);
    else if (options.sample_only)
      grid_sample_only(options, shape, world);
    else
      train(options, shape, world);
  });
}
