#include "trainers/training_loop.hpp"

#include <algorithm>
#include <csignal>
#include <optional>

#include <fmt/format.h>

#include "nn/memory_estimate.hpp"
#include "trainers/step_memory.hpp"
#include "trainers/step_traffic.hpp"

namespace trainers {

namespace {

const char* category(Phase phase) {
  switch (phase) {
    case Phase::data:
      return "data";
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::wait:
      return "wait";
    case Phase::comm:
      return "comm";
    case Phase::optimizer:
      return "optimizer";
  }
  return "";
}

std::string span_name(Phase phase, int micro) {
  switch (phase) {
    case Phase::forward:
      return fmt::format("F{}", micro);
    case Phase::backward:
      return fmt::format("B{}", micro);
    case Phase::comm:
      return "grad sync";
    default:
      return category(phase);
  }
}

}  // namespace

void StepClock::add(Phase phase, double start_s, double end_s, int micro, const std::string& name) {
  PhaseTimes& window = log_.window();
  const double seconds = end_s - start_s;
  switch (phase) {
    case Phase::data:
      window.data += seconds;
      break;
    case Phase::forward:
      window.forward += seconds;
      break;
    case Phase::backward:
      window.backward += seconds;
      break;
    case Phase::wait:  // waiting for a pipeline neighbour: communication in the log line
    case Phase::comm:
      window.comm += seconds;
      break;
    case Phase::optimizer:
      window.optimizer += seconds;
      break;
  }
  if (trace_.on) trace_.add(name.empty() ? span_name(phase, micro) : name, category(phase), start_s, end_s);
}

void training_loop(const RunStart& run, Strategy& strategy, comm::Communicator& world) {
  const TrainOptions& o = run.o;
  const nn::GPTConfig& config = run.start.config;
  const StepBatch batch = strategy.step_batch();
  const int64_t first_step = run.first_step(), tokens_per_step = batch.sequences * config.block_size;
  TrainingLog log(o, world, first_step, tokens_per_step, nn::flops_per_token(config, config.block_size),
                  run.checkpoint_dir);

  strategy.say_layout();
  comm::say("data: {} train / {} val tokens in {}, {}; {} sampling", run.data.train.size(), run.data.val.size(),
            run.data.dir.string(), run.data.origin, o.sampling);
  comm::say("global batch: {} × block {} = {} tokens per step", strategy.batch_layout(), config.block_size,
            tokens_per_step);
  say_run_notes(run, world.size(), batch);

  std::optional<float> last_val;
  auto evaluate = [&](int64_t step) {
    const auto [train_loss, val_loss] = strategy.evaluate(step);
    last_val = val_loss;
    log.evaluation(step, train_loss, val_loss);
  };
  auto save = [&](int64_t steps_done) {
    strategy.save(run.checkpoint_dir, train_state(run, steps_done, world.size(), batch, last_val));
    log.saved(steps_done);
  };

  Trace trace(world);  // --trace: spans of the first --trace-steps steps
  StepClock clock(log, trace);
  StepTraffic traffic(strategy.groups());
  StepMemory memory;  // reported after the first step, with what the step sent
  comm::TrafficByKind first_step_traffic{};
  const nn::LrSchedule schedule = lr_schedule(o);
  log.update_interrupt_note(first_step);
  for (int64_t step = first_step; step < o.max_iters; ++step) {
    if (step == o.crash_at_step && world.rank() == o.crash_rank) std::raise(SIGKILL);  // as `kill -9` would
    trace.on = !o.trace.empty() && step < first_step + o.trace_steps;
    if (o.eval_interval > 0 && step > first_step && step % o.eval_interval == 0) {
      const auto t0 = Clock::now();
      evaluate(step);
      strategy.print_sample(step);
      log.exclude(seconds_since(t0));  // kept out of the ETA and the throughput
    }
    const float lr = schedule.at(static_cast<int>(step));
    const double step_start = Trace::now_s();
    traffic.step_began();
    if (step == first_step) {
      memory.step_begins();
      first_step_traffic = world.traffic();
    }

    strategy.forward_backward(step, clock);
    float norm = 0;
    {
      Timed sync(clock, Phase::comm);
      norm = strategy.finish_gradients(o.grad_clip);
    }
    log.check_finite(step + 1, "gradient norm", norm);  // the same on every rank
    const parallel::HeldBytes held = strategy.held();   // just before the update (ZeRO-2 frees gradients)
    {
      Timed update(clock, Phase::optimizer);
      strategy.optimizer_step(lr);
    }
    log.window().total += Trace::now_s() - step_start;
    ++log.window().steps;
    traffic.step_ended();

    if (step == first_step) {
      const comm::TrafficByKind sent = world.traffic() - first_step_traffic;  // before the report's own allgather
      memory.report(held, strategy.memory_formula(), world);
      strategy.after_first_step(sent);
    }
    const int64_t done = step + 1;
    if (log.due(done)) {
      log.line(done, strategy.step_loss(), lr, norm);
      strategy.after_log_line();
    }
    if (o.ckpt_interval > 0 && done % o.ckpt_interval == 0 && done != o.max_iters) save(done);
    log.update_interrupt_note(done);
    if (!o.trace.empty() && done == first_step + o.trace_steps) {
      trace.on = false;
      trace.write(o.trace, strategy.trace_rows());
      comm::say("trace of steps {}-{} in {} (scripts/plot_trace.py draws it)", first_step + 1, done, o.trace);
    }
  }

  // The end: evaluate, a checkpoint, the exact val loss, a sample.
  const int64_t end = std::max<int64_t>(o.max_iters, first_step);
  evaluate(end);
  save(end);
  if (o.final_full_val) log.final_loss(end, strategy.full_val_loss());
  strategy.at_end();
  comm::say("communication per training step, rank 0: {}", traffic.per_step());
  comm::say("trained {} steps in {:.1f} s; checkpoint in {}, metrics in {}", end - first_step, log.elapsed(),
            run.checkpoint_dir.string(), o.metrics);
  strategy.print_sample(end);
}

}  // namespace trainers
