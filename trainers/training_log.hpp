// What a training run tells its user, the same for every trainer: the log line every
// --log-interval steps (loss, learning rate, gradient norm, phase times, throughput, ETA)
// and the same fields in the metrics file, the evaluations, the final exact loss, the
// divergence check, and the line Ctrl-C prints.
//
//   step 100/800 | loss 2.4680 | lr 4.95e-03 | norm 0.600 | 44.2 ms (data 0.0 fwd 13.9 bwd 27.6
//   comm 1.9 opt 0.8) | 34750 tok/s (17375/rank) | 90.7 GFLOP/s |  12% eta 31s
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "comm/communicator.hpp"
#include "nn/gpt.hpp"
#include "trainers/metrics_file.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/train_options.hpp"

namespace trainers {

// What the mixtures of experts did in the steps since the last log line, over every rank:
// tokens each expert of each mixture block took per step (the fewest, the mean, the most),
// the share of choices dropped over capacity, the mean balancing loss (1: balanced, E: one
// expert takes all).
struct RoutingSummary {
  double tokens_min = 0, tokens_mean = 0, tokens_max = 0, dropped = 0, aux_loss = 0;
  double dispatch_seconds = 0;  // per step, the ranks' mean: expert parallelism's exchanges
};
// Collective over `world`; clears `mine`.
RoutingSummary summarise_routing(nn::RoutingStats& mine, const nn::GPTConfig& config, comm::Communicator& world,
                                 int steps);

// Seconds spent in each phase of the steps since the last log line.
struct PhaseTimes {
  double data = 0, forward = 0, backward = 0, comm = 0, optimizer = 0, total = 0;
  int steps = 0;
};

class TrainingLog {
 public:
  // Rank 0 writes the metrics file (fresh, or continued from `first_step` when resuming).
  TrainingLog(const TrainOptions& o, comm::Communicator& world, int64_t first_step, int64_t tokens_per_step,
              double flops_per_token, std::filesystem::path checkpoint_dir);

  PhaseTimes& window() { return window_; }  // add each step's phase times here
  bool due(int64_t done) const { return done % o_.log_interval == 0 || done == o_.max_iters; }
  // The log line and its metrics row for the steps since the last one; `loss` is the mean over
  // ranks of the step's loss (the same on every rank). Stops a diverged run.
  void line(int64_t done, float loss, float lr, float norm, const std::optional<RoutingSummary>& routing = {});
  void evaluation(int64_t step, float train_loss, float val_loss);  // stops a diverged run too
  void final_loss(int64_t step, double val_loss_full);
  void exclude(double seconds) { excluded_s_ += seconds; }  // evaluations: out of the ETA
  double elapsed() const { return seconds_since(start_); }

  // Non-finite → "training diverged at step S: the <what> is nan; stopped without saving (…)",
  // one line, exit status 2 (comm::UsageError). Call with values that are the same on every rank.
  void check_finite(int64_t step, const char* what, double value) const;
  // A checkpoint of step `step` is on disk now (for the notes above).
  void saved(int64_t step) { last_saved_ = step; }
  int64_t last_saved() const { return last_saved_; }
  // After each step: what rank 0 prints if the user interrupts the job now.
  void update_interrupt_note(int64_t step) const;
  // The job stops after step `step`, saved there (a stop a signal asked for): rank 0 says so,
  // in the interrupt note's words.
  void stopped(int64_t step) const;

 private:
  std::string interrupt_note(int64_t step) const;  // "interrupted at step S; the last checkpoint …"

  const TrainOptions& o_;
  comm::Communicator& world_;
  int64_t first_step_, tokens_per_step_;
  double flops_per_token_;
  std::filesystem::path checkpoint_dir_;
  std::optional<MetricsFile> metrics_;
  PhaseTimes window_;
  Clock::time_point start_ = Clock::now();
  double excluded_s_ = 0;
  int64_t last_saved_;
};

}  // namespace trainers
