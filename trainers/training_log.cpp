#include "trainers/training_log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "comm/watchdog/termination.hpp"
#include "comm/runtime.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace trainers {

TrainingLog::TrainingLog(const TrainOptions& o, comm::Communicator& world, int64_t first_step, int64_t tokens_per_step,
                         double flops_per_token, std::filesystem::path checkpoint_dir)
    : o_(o),
      world_(world),
      first_step_(first_step),
      tokens_per_step_(tokens_per_step),
      flops_per_token_(flops_per_token),
      checkpoint_dir_(std::move(checkpoint_dir)),
      last_saved_(o.resume ? first_step : -1) {
  if (world.rank() == 0) metrics_.emplace(o.metrics, o.resume ? std::optional<int64_t>(first_step) : std::nullopt);
}

RoutingSummary summarise_routing(nn::RoutingStats& mine, const nn::GPTConfig& c, comm::Communicator& world,
                                 int steps) {
  // [each mixture block's E experts' tokens | choices, dropped, Σ aux, aux terms], summed over
  // the ranks: data-parallel replicas add their batches, pipeline stages their blocks.
  const auto blocks = static_cast<std::size_t>(c.n_layer / c.moe_every), E = static_cast<std::size_t>(c.n_experts);
  const std::size_t tail = blocks * E;
  std::vector<double> sums(tail + 5, 0.0);
  for (const auto& [layer, tokens] : mine.tokens_per_expert)
    for (std::size_t e = 0; e < E; ++e)
      sums[static_cast<std::size_t>(layer / c.moe_every) * E + e] = static_cast<double>(tokens[e]);
  sums[tail] = static_cast<double>(mine.choices);
  sums[tail + 1] = static_cast<double>(mine.dropped);
  sums[tail + 2] = mine.aux_loss;
  sums[tail + 3] = static_cast<double>(mine.aux_terms);
  sums[tail + 4] = mine.dispatch_seconds;
  world.allreduce(std::span<double>(sums), comm::ReduceOp::sum);
  mine.clear();
  RoutingSummary s;
  steps = std::max(steps, 1);
  const auto per_expert = std::span<const double>(sums).first(tail);
  s.tokens_min = *std::min_element(per_expert.begin(), per_expert.end()) / steps;
  s.tokens_max = *std::max_element(per_expert.begin(), per_expert.end()) / steps;
  s.tokens_mean = std::accumulate(per_expert.begin(), per_expert.end(), 0.0) / static_cast<double>(tail) / steps;
  s.dropped = sums[tail] > 0 ? sums[tail + 1] / sums[tail] : 0.0;
  s.aux_loss = sums[tail + 3] > 0 ? sums[tail + 2] / sums[tail + 3] : 0.0;
  s.dispatch_seconds = sums[tail + 4] / world.size() / steps;
  return s;
}

void TrainingLog::line(int64_t done, float loss, float lr, float norm, const std::optional<RoutingSummary>& routing) {
  check_finite(done, "loss", loss);
  const int N = world_.size();
  const PhaseTimes& w = window_;
  const double per_step = w.total / w.steps, tokens_per_s = static_cast<double>(tokens_per_step_) / per_step;
  const double flops = flops_per_token_ * tokens_per_s;
  const double ms = 1e3 / w.steps;
  const double progress = static_cast<double>(done - first_step_) / static_cast<double>(o_.max_iters - first_step_);
  const double elapsed = seconds_since(start_) - excluded_s_;
  comm::say(
      "step {:>{}}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.1f} ms (data {:.1f} fwd {:.1f} bwd {:.1f} "
      "comm {:.1f} opt {:.1f}) | {:.0f} tok/s ({:.0f}/rank) | {:.1f} GFLOP/s | {:3.0f}% eta {}",
      done, std::to_string(o_.max_iters).size(), o_.max_iters, loss, lr, norm, per_step * 1e3, w.data * ms,
      w.forward * ms, w.backward * ms, w.comm * ms, w.optimizer * ms, tokens_per_s, tokens_per_s / N, flops / 1e9,
      100.0 * progress, format_duration(elapsed / progress * (1.0 - progress)));
  if (routing)
    comm::say("  experts: tokens per expert and step {:.0f} / {:.0f} / {:.0f} (min / mean / max), {:.1f}% of choices "
              "dropped, balancing loss {:.3f}",
              routing->tokens_min, routing->tokens_mean, routing->tokens_max, 100.0 * routing->dropped,
              routing->aux_loss);
  if (routing && routing->dispatch_seconds > 0)  // expert parallelism (train_3d --ep)
    comm::say("  expert dispatch: {:.2f} ms a step in the ep group's all-to-alls, forward and backward ({:.0f}% of the "
              "step; the ranks' mean)",
              routing->dispatch_seconds * 1e3, 100.0 * routing->dispatch_seconds / per_step);
  if (metrics_) {
    nlohmann::json record = {{"kind", "train"},
                     {"step", done},
                     {"loss", loss},
                     {"lr", lr},
                     {"grad_norm", norm},
                     {"step_ms", per_step * 1e3},
                     {"data_ms", w.data * ms},
                     {"forward_ms", w.forward * ms},
                     {"backward_ms", w.backward * ms},
                     {"comm_ms", w.comm * ms},
                     {"optimizer_ms", w.optimizer * ms},
                     {"tokens_per_s", tokens_per_s},
                     {"tokens_per_s_per_rank", tokens_per_s / N},
                     {"model_flops_per_s", flops},
                     {"elapsed_s", seconds_since(start_)}};
    if (routing) {
      record["expert_tokens_min"] = routing->tokens_min;
      record["expert_tokens_mean"] = routing->tokens_mean;
      record["expert_tokens_max"] = routing->tokens_max;
      record["dropped_fraction"] = routing->dropped;
      record["aux_loss"] = routing->aux_loss;
    }
    metrics_->write(record);
  }
  window_ = PhaseTimes{};
}

void TrainingLog::evaluation(int64_t step, float train_loss, float val_loss) {
  check_finite(step, "val loss", val_loss);
  comm::say("step {}: train loss {:.4f}, val loss {:.4f}", step, train_loss, val_loss);
  if (metrics_)
    metrics_->write({{"kind", "eval"},
                     {"step", step},
                     {"train_loss", train_loss},
                     {"val_loss", val_loss},
                     {"elapsed_s", seconds_since(start_)}});
}

void TrainingLog::final_loss(int64_t step, double val_loss_full) {
  if (metrics_)
    metrics_->write(
        {{"kind", "final"}, {"step", step}, {"val_loss_full", val_loss_full}, {"elapsed_s", seconds_since(start_)}});
  comm::say("val_loss_full={:.6f}", val_loss_full);
}

void TrainingLog::check_finite(int64_t step, const char* what, double value) const {
  if (std::isfinite(value)) return;
  throw comm::UsageError(fmt::format(
      "training diverged at step {}: the {} is {}; stopped without saving ({}) — lower --learning-rate, or clip with "
      "--grad-clip",
      step, what,
      std::isnan(value) ? "nan"
      : value > 0       ? "inf"
                        : "-inf",
      last_saved_ >= 0 ? fmt::format("the checkpoint of step {} in {} is kept", last_saved_, checkpoint_dir_.string())
                       : std::string("no checkpoint was written")));
}

std::string TrainingLog::interrupt_note(int64_t step) const {
  const std::string saved = last_saved_ >= 0
                                ? fmt::format("the last checkpoint (step {}) is in {}; resume with: {}", last_saved_,
                                              checkpoint_dir_.string(), resume_command(o_, world_.size()))
                                : std::string("no checkpoint was written yet");
  return fmt::format("interrupted at step {}; {}", step, saved);
}

void TrainingLog::update_interrupt_note(int64_t step) const {
  if (world_.rank() == 0) comm::set_interrupt_note(interrupt_note(step));
}

void TrainingLog::stopped(int64_t step) const {
  // On stderr, as the signal handler's notes: mpiexec may be ending the job (a Ctrl-C), and
  // then it no longer forwards the ranks' stdout.
  if (world_.rank() == 0) {
    fmt::print(stderr, "{}\n", interrupt_note(step));
    std::fflush(stderr);
  }
}

}  // namespace trainers
