// The one training loop of every trainer (train_dp, train_pp, train_tp, train_3d), and the
// interface through which a parallelism strategy plugs into it — as picotron's train.py
// calls train_step or train_step_pipeline_1f1b, and Megatron's loop calls the schedule
// get_forward_backward_func picked without knowing which.
//
//   for step in [first step, --max-iters):
//     every --eval-interval steps: strategy.evaluate, strategy.print_sample
//     strategy.forward_backward(step)       the step's micro-batches (data, forward, backward)
//     strategy.finish_gradients(--grad-clip) averaged / summed over the groups, clipped: the norm
//     strategy.optimizer_step(lr)           AdamW on what this rank holds
//     the log line (strategy.step_loss), a checkpoint (strategy.save: a snapshot the writer's
//     thread puts on disk while the next steps run), the interrupt note
//   at the end: evaluate, save, the exact val loss, the traffic line, a sample
//
// The loop owns everything that is the same for every strategy: the learning rate, the
// crash hook, the intervals, the log line and metrics, the phase times and the --trace
// timeline, the first step's memory and traffic reports, the divergence check — and, when a
// peer is lost, the last completed step saved by a survivor that holds all of it
// (<out-dir>/rescue/rank<R>, which nanodist-run restarts from; docs/fault_tolerance.md).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "nn/checkpoint_writer.hpp"
#include "parallel/dp/zero_optimizer.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/trace.hpp"
#include "trainers/training_log.hpp"

namespace trainers {

// Where a step's time goes. Each phase has one name in the log line and in the trace:
//   data · forward "F<m>" · backward "B<m>" · wait (for a pipeline neighbour, counted as comm)
//   · comm "grad sync" · optimizer
enum class Phase { data, forward, backward, wait, comm, optimizer };

// The phase times of the steps since the last log line and the --trace spans, fed together
// from one clock.
class StepClock {
 public:
  StepClock(TrainingLog& log, Trace& trace) : log_(log), trace_(trace) {}
  // A span of `phase` from start_s to end_s (Trace::now_s()); micro-batch `micro` names
  // forwards and backwards, `name` overrides the phase's name (a wait: "recv from stage 1").
  void add(Phase phase, double start_s, double end_s, int micro = -1, const std::string& name = "");
  // Communication that ran beside the rank's work (a bucket's allreduce, "bucket 3"): a span
  // on the rank's communication row of the trace only — the log line counts the time the
  // rank waited for it, which the caller times as Phase::comm.
  void add_beside(const std::string& name, double start_s, double end_s);

 private:
  TrainingLog& log_;
  Trace& trace_;
};

// Times one phase from here to the end of the scope — a phase is one line:
//   { Timed forward(clock, Phase::forward, micro); loss = model.loss(…); }
class Timed {
 public:
  Timed(StepClock& clock, Phase phase, int micro = -1)
      : clock_(clock), phase_(phase), micro_(micro), start_(Trace::now_s()) {}
  ~Timed() { clock_.add(phase_, start_, Trace::now_s(), micro_); }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  StepClock& clock_;
  Phase phase_;
  int micro_;
  double start_;
};

// What each rank should send in a step, by a formula (ZeRO's), printed beside what it sent.
struct TrafficFormula {
  double bytes_per_rank = 0;
  std::string terms;  // "2 ranks, 1 micro-step(s), Ψ = 0.41M, gradients fp32"
};

// What the loop says of a strategy: facts, given once before step 0.
struct StrategyFacts {
  std::vector<std::string> layout;  // rank 0's first lines: the program, the split (then the loop's "model:")
  std::string batch_layout;         // "2 ranks × micro-batch 4 × 1 accumulation step(s)"
  StepBatch step_batch;             // replicas and sequences of one optimizer step
  // The communicators whose traffic the run reports, with their names ("dp", "tp"); empty: the world.
  std::vector<std::pair<std::string, const comm::Communicator*>> groups;
  std::vector<std::string> trace_rows;  // a label per rank in --trace; empty: "rank 2"
  // Beside each rank's first-step memory: " (ZeRO-1 formula 3.1 MiB)" — this rank's bytes by a
  // formula, and its name; no name: none.
  struct MemoryFormula {
    std::string name;
    double bytes = 0;
  } memory_formula;
  std::optional<TrafficFormula> traffic_formula;  // beside the first step's traffic
};

// What the strategy says at each log line: the loss, and a line of its own measurements since
// the last one (the pipeline's bubble) or "".
struct LogFacts {
  float loss = 0;  // the last step's loss, mean over the replicas
  std::string note;
};

// What a parallelism strategy supplies: the step, its evaluation and checkpoints, and the facts
// the loop reports. Every call is collective over the world (each rank calls it at the same
// point of the loop) unless it says otherwise.
class Strategy {
 public:
  virtual ~Strategy() = default;

  virtual StrategyFacts facts() const = 0;  // not collective

  // ---- a step
  // Forward and backward of the step's micro-batches, each phase timed on `clock`.
  virtual void forward_backward(int64_t step, StepClock& clock) = 0;
  // Gradients completed (averaged over replicas, tied and replicated copies summed), then the
  // global norm — the same on every rank — and clipping to max_norm (≤ 0: only measured).
  virtual float finish_gradients(float max_norm) = 0;
  virtual void optimizer_step(float lr) = 0;     // AdamW on what this rank holds, gradients zeroed
  virtual LogFacts log_facts() = 0;              // at a log line
  // Not collective: the routing this rank's mixture blocks did since the last log line.
  virtual nn::RoutingStats& routing_stats() = 0;
  virtual parallel::HeldBytes held() const = 0;  // not collective: what this rank holds now

  // ---- evaluation, samples, checkpoints
  virtual std::pair<float, float> evaluate(int64_t step) = 0;  // nanoGPT's estimate_loss: train, val
  virtual double full_val_loss() = 0;                          // the exact loss over the val split
  virtual void print_sample(int64_t step) = 0;                 // "---- sample at step S ----" (rank 0)
  // The whole model and AdamW state, gathered to the rank that hands it to `writer` (which
  // writes it in the background unless --ckpt-background 0).
  virtual void save(const std::filesystem::path& dir, const nlohmann::json& train_state,
                    nn::CheckpointWriter& writer) = 0;
  // Not collective: this rank writes the whole state alone, now, when it holds all of it (a
  // replica of replicated data parallelism) — the survivors' save when a peer is lost.
  // Returns false where the state is sharded (ZeRO, pipeline, tensor): the last checkpoint serves.
  virtual bool save_alone(const std::filesystem::path& /*dir*/, const nlohmann::json& /*train_state*/) {
    return false;
  }
  virtual void at_end() {}  // after the last checkpoint (check mode's consistency checks)
};

// Trains from run.first_step() to --max-iters, then evaluates, saves and samples.
void training_loop(const RunStart& run, Strategy& strategy, comm::Communicator& world);

}  // namespace trainers
