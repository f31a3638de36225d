#include "trainers/training_loop.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <optional>

#include <fmt/format.h>

#include "comm/runtime.hpp"
#include "comm/watchdog/failure_save.hpp"
#include "comm/watchdog/termination.hpp"
#include "nn/autocast.hpp"
#include "nn/gemm.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/ops.hpp"
#include "nn/threads.hpp"
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
  if (trace_.on()) trace_.add(name.empty() ? span_name(phase, micro) : name, category(phase), start_s, end_s);
}

void StepClock::add_beside(const std::string& name, double start_s, double end_s) {
  if (trace_.on()) trace_.add(name, "comm", start_s, end_s, Trace::Row::communication);
}

namespace {

// How long a survivor may take to save the last completed step when a peer is lost: the
// model here is MBs (a second); past it the rank exits and the restart uses the last checkpoint.
constexpr double kFailureSaveDeadlineSeconds = 60;

// The facts with the loop's defaults filled in: the world's traffic, "rank r" rows.
StrategyFacts with_defaults(StrategyFacts facts, comm::Communicator& world) {
  if (facts.groups.empty()) facts.groups = {{"world", &world}};
  for (int r = static_cast<int>(facts.trace_rows.size()); r < world.size(); ++r)
    facts.trace_rows.push_back(fmt::format("rank {}", r));
  return facts;
}

// One run of the loop: what it keeps between steps.
class Loop {
 public:
  Loop(const RunStart& run, Strategy& strategy, comm::Communicator& world)
      : run_(run),
        o_(run.options),
        strategy_(strategy),
        world_(world),
        facts_(with_defaults(strategy.facts(), world)),
        batch_(facts_.step_batch),
        first_step_(run.first_step()),
        log_(o_, world, first_step_, batch_.sequences * run.start.config.block_size,
             nn::flops_per_token(run.start.config, run.start.config.block_size), run.checkpoint_dir),
        trace_(world),
        clock_(log_, trace_),
        traffic_(facts_.groups),
        schedule_(lr_schedule(o_)),
        stop_vote_(world.with_backend(comm::BackendKind::mpi)),
        writer_(o_.ckpt_background) {}
  ~Loop() { comm::set_failure_save(nullptr, 1); }  // it refers to this loop

  void say_start() const;
  void train();

 private:
  float step(int64_t step, float lr);                   // one optimizer step; returns the gradient norm
  void after_step(int64_t done, float lr, float norm);  // log line, checkpoint, interrupt note, trace
  void evaluate(int64_t step);
  void save(int64_t steps_done);
  void save_on_failure();  // a peer is lost: this rank's last completed step, if it holds all of it
  int stop_asked();  // the signal any rank was asked to stop by (Ctrl-C, SIGTERM, SIGUSR1), or 0
  [[noreturn]] void stop(int64_t steps_done, int signal);
  void end();

  const RunStart& run_;
  const TrainOptions& o_;
  Strategy& strategy_;
  comm::Communicator& world_;
  const StrategyFacts facts_;
  const StepBatch batch_;
  const int64_t first_step_;
  TrainingLog log_;
  Trace trace_;  // --trace: spans of the first --trace-steps steps
  StepClock clock_;
  StepTraffic traffic_;
  StepMemory memory_;  // reported after the first step, with what the step sent
  const nn::LrSchedule schedule_;
  std::optional<float> last_val_;
  // The ranks' vote on stopping, once per step: a communicator of its own, so that the step's
  // traffic stays the strategy's alone.
  comm::Communicator stop_vote_;
  nn::CheckpointWriter writer_;  // --ckpt-background: snapshots written by a thread of its own
  // Steps whose update is in the weights; the step in flight is not (what save_on_failure saves).
  std::atomic<int64_t> completed_steps_{0};
};

void Loop::say_start() const {
  const nn::GPTConfig& c = run_.start.config;
  for (const std::string& line : facts_.layout) comm::say("{}", line);
  say_compute(world_, compute_modes(o_));
  const double parameters = nn::parameter_count(c) - c.block_size * c.n_embd;  // nanoGPT's count: no wpe
  comm::say("model: {} layers, {} heads, {} wide, block {}, vocab {}: {:.2f}M parameters", c.n_layer, c.n_head,
            c.n_embd, c.block_size, c.vocab_size, parameters / 1e6);
  if (c.n_experts > 0)
    comm::say("mixture of experts: {} experts in {} of the {} blocks (every {}), {} per token, capacity ⌈{}·{}·{}/{}⌉ = "
              "{} tokens of a sequence per expert, balancing loss weight {}: {:.2f}M parameters used per token",
              c.n_experts, c.n_layer / c.moe_every, c.n_layer, c.moe_every, c.experts_per_token, c.capacity_factor,
              c.experts_per_token, c.block_size, c.n_experts,
              nn::expert_capacity(c.block_size, c.n_experts, c.experts_per_token, c.capacity_factor),
              c.aux_loss_weight, (nn::active_parameter_count(c) - c.block_size * c.n_embd) / 1e6);
  comm::say("data: {} train / {} val tokens in {}, {}; {} sampling", run_.data.train.size(), run_.data.val.size(),
            run_.data.dir.string(), run_.data.origin, kSamplingNames[static_cast<std::size_t>(o_.sampling)]);
  comm::say("global batch: {} × block {} = {} tokens per step", facts_.batch_layout, c.block_size,
            batch_.sequences * c.block_size);
  say_run_notes(run_, world_.size(), batch_);
}

void Loop::train() {
  log_.update_interrupt_note(first_step_);
  completed_steps_ = first_step_;
  // The watchdog's ending path when a peer is lost: the survivor that reports first on its node
  // saves the last completed step (a whole replica), within the deadline.
  comm::set_failure_save([this] { save_on_failure(); }, kFailureSaveDeadlineSeconds);
  for (int64_t step = first_step_; step < o_.max_iters; ++step) {
    if (step == o_.crash_at_step && world_.rank() == o_.crash_rank) std::raise(SIGKILL);  // as `kill -9` would
    if (o_.eval_interval > 0 && step > first_step_ && step % o_.eval_interval == 0) {
      const auto t0 = Clock::now();
      evaluate(step);
      strategy_.print_sample(step);
      log_.exclude(seconds_since(t0));  // kept out of the ETA and the throughput
    }
    // (after the evaluation: the trace holds training steps, the layers' spans inside them)
    trace_.set_on(!o_.trace.empty() && step < first_step_ + o_.trace_steps);
    const float lr = schedule_.at(static_cast<int>(step));
    const float norm = this->step(step, lr);
    after_step(step + 1, lr, norm);
    if (const int signal = stop_asked()) stop(step + 1, signal);
  }
  end();
}

// A signal reaches the ranks at different moments (mpiexec sends one to each; someone may
// signal one rank alone), so each step ends with a vote: the largest signal number any rank
// holds. Every rank gets the same answer after the same step, and they stop there together.
int Loop::stop_asked() {
  int signal = comm::stop_signal();
  stop_vote_.allreduce(std::span(&signal, 1), comm::ReduceOp::max);
  return signal;
}

// Saved at the step the ranks agreed on (unless its checkpoint is already there), the note,
// and the exit status: 0 for SIGUSR1 (a scheduler's "save and stop", done as asked), 128 + the
// signal for an interrupt, as a shell says it.
void Loop::stop(int64_t steps_done, int signal) {
  if (log_.last_saved() != steps_done) save(steps_done);
  writer_.wait();
  log_.stopped(steps_done);
  comm::end_program(signal == SIGUSR1 ? 0 : 128 + signal);
}

float Loop::step(int64_t step, float lr) {
  const bool first = step == first_step_;
  const double start = Trace::now_s();
  traffic_.step_began();
  comm::TrafficByKind traffic_at_start{};
  if (first) {
    memory_.step_begins();
    traffic_at_start = world_.traffic();
  }

  {
    nn::WeightCastCache weights_cast_once;  // --precision bf16: each weight cast once for all micro-batches
    strategy_.forward_backward(step, clock_);
  }
  float norm = 0;
  {
    Timed sync(clock_, Phase::comm);
    norm = strategy_.finish_gradients(o_.grad_clip);
  }
  log_.check_finite(step + 1, "gradient norm", norm);  // the same on every rank
  parallel::HeldBytes held;
  if (first) held = strategy_.held();  // just before the update (ZeRO-2 frees gradients)
  {
    Timed update(clock_, Phase::optimizer);
    strategy_.optimizer_step(lr);
  }
  completed_steps_ = step + 1;
  log_.window().total += Trace::now_s() - start;
  ++log_.window().steps;
  traffic_.step_ended();

  if (first) {
    const comm::TrafficByKind sent = world_.traffic() - traffic_at_start;  // before the report's own allgather
    memory_.report(held, facts_.memory_formula.name, facts_.memory_formula.bytes, o_.recompute, world_);
    if (const auto& formula = facts_.traffic_formula)
      comm::say("communication in the step: {} → each rank sends ≈ {:.1f} MB (formula {:.1f} MB: {})",
                comm::describe(sent), comm::bytes_sent_per_rank(sent, world_.size()) / 1e6,
                formula->bytes_per_rank / 1e6, formula->terms);
  }
  return norm;
}

void Loop::after_step(int64_t done, float lr, float norm) {
  if (log_.due(done)) {
    const LogFacts facts = strategy_.log_facts();
    std::optional<RoutingSummary> routing;
    if (run_.start.config.n_experts > 0)
      routing = summarise_routing(strategy_.routing_stats(), run_.start.config, world_, log_.window().steps);
    log_.line(done, facts.loss, lr, norm, routing);
    if (!facts.note.empty()) comm::say("{}", facts.note);
  }
  if (o_.ckpt_interval > 0 && done % o_.ckpt_interval == 0 && done != o_.max_iters) save(done);
  log_.update_interrupt_note(done);
  if (!o_.trace.empty() && done == first_step_ + o_.trace_steps) {
    trace_.set_on(false);
    trace_.write(o_.trace, facts_.trace_rows);
    comm::say("trace of steps {}-{} in {} (scripts/plot_trace.py draws it)", first_step_ + 1, done, o_.trace);
  }
}

void Loop::evaluate(int64_t step) {
  const auto [train_loss, val_loss] = strategy_.evaluate(step);
  last_val_ = val_loss;
  log_.evaluation(step, train_loss, val_loss);
}

void Loop::save(int64_t steps_done) {
  const nlohmann::json state = train_state(run_, steps_done, world_.size(), batch_, last_val_);
  if (steps_done == o_.crash_in_checkpoint) {  // testing: what a kill during the write leaves
    writer_.wait();  // the previous checkpoint complete, so that the kill meets this one alone
    nn::CheckpointWriter dying(false, [] { std::raise(SIGKILL); });  // after checkpoint.tmp, before the swap
    strategy_.save(run_.checkpoint_dir, state, dying);
  } else {
    strategy_.save(run_.checkpoint_dir, state, writer_);
  }
  log_.saved(steps_done);
}

// Runs on the thread whose wait failed, while the training thread is blocked in the same
// step's collectives: the weights hold exactly completed_steps_ updates. A checkpoint still
// being written goes to disk first (so the newest state is the rescue's, not a torn one).
void Loop::save_on_failure() {
  try {
    writer_.wait();
  } catch (const std::exception& e) {
    fmt::print(stderr, "[rank {}] the checkpoint in progress failed: {}\n", world_.rank(), e.what());
  }
  const int64_t done = completed_steps_;
  const std::filesystem::path dir =
      run_.checkpoint_dir.parent_path() / "rescue" / fmt::format("rank{}", world_.rank());
  const nlohmann::json state = train_state(run_, done, world_.size(), batch_, last_val_);
  if (done > first_step_ && strategy_.save_alone(dir, state))
    fmt::print(stderr, "[rank {}] a peer was lost after {} completed steps: saved them in {}\n", world_.rank(), done,
               dir.string());
  else
    fmt::print(stderr, "[rank {}] a peer was lost after {} completed steps; {}\n", world_.rank(), done,
               done == first_step_ ? "none since this run started" : "the state is sharded: a restart uses the last checkpoint");
}

// The end: evaluate, a checkpoint, the exact val loss, a sample.
void Loop::end() {
  const int64_t end = std::max<int64_t>(o_.max_iters, first_step_);
  evaluate(end);
  save(end);
  writer_.wait();  // the final checkpoint on disk before the run says so
  if (o_.final_full_val) log_.final_loss(end, strategy_.full_val_loss());
  strategy_.at_end();
  comm::say("communication per training step, rank 0: {}", traffic_.per_step());
  comm::say("trained {} steps in {:.1f} s; checkpoint in {}, metrics in {}", end - first_step_, log_.elapsed(),
            run_.checkpoint_dir.string(), o_.metrics);
  strategy_.print_sample(end);
}

}  // namespace

void training_loop(const RunStart& run, Strategy& strategy, comm::Communicator& world) {
  Loop loop(run, strategy, world);
  loop.say_start();
  // A Ctrl-C, mpiexec's SIGTERM or a scheduler's SIGUSR1 stops the run after the step in
  // progress, with a checkpoint there; a second Ctrl-C stops it at once.
  comm::stop_on_signals("the job stops after this step and saves a checkpoint there (interrupt again to stop at "
                        "once, without saving)");
  loop.train();
}

}  // namespace trainers
