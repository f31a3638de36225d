#include "trainers/pipeline_strategy.hpp"

#include <algorithm>
#include <array>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/cli_checks.hpp"
#include "comm/runtime.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/memory_estimate.hpp"
#include "parallel/dp/replicas_by_role.hpp"
#include "parallel/pp/schedule.hpp"

namespace trainers {

void add_schedule_flags(CLI::App& app, ScheduleOptions& s, parallel::Layout& layout) {
  comm::cli::add_choice(app, "--schedule", s.schedule, parallel::kScheduleNames,
                        "pipeline schedule: gpipe (naive) or 1f1b (interleaved with --virtual-stages > 1)");
  layout.micro_batches = 0;  // not given: what fits the layout (settle_pipeline_layout)
  app.add_option("--micro-batches", layout.micro_batches,
                 "micro-batches M per step (must divide --batch-size; default: 1 without a pipeline, else 4 or the "
                 "most that divide --batch-size)")
      ->check(comm::cli::whole(1));
  app.add_option("--virtual-stages", layout.virtual_stages,
                 "chunks of blocks per stage V: stage r holds chunks r, r+P, …; > 1 runs interleaved 1F1B "
                 "(Megatron), a (P−1)/(V·M+P−1) bubble for V times the messages")
      ->check(comm::cli::whole(1, 64))
      ->capture_default_str();
}

void settle_pipeline_layout(GridShape& shape, const RunStart& run, int world_size, const std::string& program) {
  const TrainOptions& o = run.options;
  if (shape.micro_batches == 0)
    shape.micro_batches = parallel::Layout::default_micro_batches(shape.pp, shape.virtual_stages, o.batch_size);
  if (o.grad_accum != 1) throw comm::UsageError(program + ": use --micro-batches instead of --grad-accum");
  check_layout(run, [&] { shape.check(layout_job(o, run.start.config, world_size)); });
}

std::string PipelineStrategy::virtual_stages_note() const {
  if (shape_.virtual_stages == 1) return "";
  return fmt::format(" interleaved, {} chunks per stage ({} virtual stages; stage r holds chunks r, r+{}, …)",
                     shape_.virtual_stages, shape_.virtual_stages * grid_.pp, grid_.pp);
}

LayerFaults faults_of(const ScheduleOptions& s, const TrainOptions& o, int world_rank) {
  if (world_rank != o.crash_rank) return {};
  return {.skip_ring_at_step = s.skip_ring_at_step, .skip_dispatch_at_step = s.skip_dispatch_at_step};
}

nn::DropoutBatch PipelineStrategy::dropout_batch(int64_t step, int m) const {
  const int64_t rows = o_.batch_size / shape_.micro_batches;
  return {.seed = o_.seed, .step = step, .first_sample = sampler_.first_sample(0) + m * rows};
}

PipelineStrategy::PipelineStrategy(const RunStart& run, comm::Communicator& world, const GridShape& shape,
                                   uint64_t seed, const ScheduleOptions& s)
    : GridStrategy(run, world, shape, seed, faults_of(s, run.options, world.rank())),
      s_(s),
      sampler_(run.data.train, T(), o_.batch_size, 1, o_.sampling, o_.seed, grid_.dp_rank, grid_.dp),
      stage_(grid_model_.model(), grid_.pp_group, shape.micro_batches, o_.batch_size / shape.micro_batches, T()) {
  stage_.before_backward = [this](int m) {
    if (averager_) averager_->before_backward(m == shape_.micro_batches - 1);  // armed for the last one
    if (zero_) zero_->before_backward(m == shape_.micro_batches - 1);
  };
  if (zero_) return;  // ZeRO's reduce-scatters are the averaging
  // Each parameter over the ranks holding its copy (dp × cp; an expert's expert-dp ranks), bucket by
  // bucket as backward completes it; null with one replica (nothing to average, and no bf16 wire
  // to round the gradients through).
  averager_ = parallel::make_averager_by_role(o_.ddp, grid_model_.model(), grid_,
                                              static_cast<std::size_t>(o_.bucket_mb * 1e6), o_.grad_comm);
}

StrategyFacts PipelineStrategy::facts() const {
  StrategyFacts facts{.batch_layout = fmt::format("{} {} × {} micro-batches × {}", grid_.dp, replicas_are_,
                                                  shape_.micro_batches, o_.batch_size / shape_.micro_batches),
                      .step_batch = {grid_.dp, static_cast<int64_t>(grid_.dp) * o_.batch_size},
                      .groups = grid_groups(),
                      .memory_formula = zero_memory_formula()};
  for (int r = 0; r < world_.size(); ++r) {
    const int stage = shape_.place_of(r).pp;
    facts.trace_rows.push_back(grid_.describe(r) + (stage == 0 ? " (embedding)" : "") +
                               (stage == grid_.pp - 1 ? " (head)" : ""));
  }
  return facts;
}

void PipelineStrategy::forward_backward(int64_t step, StepClock& clock) {
  stage_.skip_sends = step == s_.skip_send_at_step && world_.rank() == o_.crash_rank;
  grid_model_.begin_step(step);
  {
    Timed data(clock, Phase::data);
    sampler_.fill(step, 0, batch_);  // this replica's batch; micro-batch m is rows [m·b, (m+1)·b)
    stage_.set_batch(batch_.ids, batch_.targets);
    stage_.before_forward = [this, step](int m, int /*chunk*/) {
      grid_model_.model().set_dropout_batch(dropout_batch(step, m));
    };
  }
  // Every forward, backward and wait for a neighbour is timed by the stage itself.
  stage_.on_span = [&clock](const std::string& name, parallel::StageSpan kind, double start, double end) {
    constexpr std::array<Phase, 3> kPhaseOf = {Phase::forward, Phase::backward, Phase::wait};  // by StageSpan
    clock.add(kPhaseOf[static_cast<std::size_t>(kind)], start, end, -1, name);
  };
  nn::BufferPool::reset_peak();
  const std::size_t base_bytes = nn::BufferPool::bytes_in_use();
  stage_.start_step();
  parallel::run_schedule(s_.schedule, stage_);
  stage_.on_span = nullptr;
  window_times_.forward += stage_.times().forward;
  window_times_.backward += stage_.times().backward;
  window_times_.wait += stage_.times().wait;
  window_peak_bytes_ = std::max(window_peak_bytes_, nn::BufferPool::peak_bytes_in_use() - base_bytes);
  window_peak_in_flight_ = std::max(window_peak_in_flight_, stage_.peak_in_flight());
}

float PipelineStrategy::finish_gradients(float max_norm) {
  if (zero_) return zero_->finish_gradients(max_norm);
  return grid_model_.finish_gradients(max_norm, o_.grad_comm, averager_.get());
}

LogFacts PipelineStrategy::log_facts() {
  std::array<float, 1> loss{stage_.loss()};
  grid_.pp_group.broadcast(std::span<float>(loss), grid_.pp - 1);
  LogFacts facts{.loss = mean_over(grid_.dp_group, loss[0])};
  // Each stage's share of waiting, its peak activations and micro-batches in flight.
  const double waited = window_times_.wait / std::max(window_times_.wait + window_times_.compute(), 1e-12);
  const std::array<double, 3> mine{waited, static_cast<double>(window_peak_bytes_),
                                   static_cast<double>(window_peak_in_flight_)};
  std::vector<double> all(mine.size() * static_cast<std::size_t>(grid_.pp));
  grid_.pp_group.allgather(std::span<const double>(mine), std::span<double>(all));
  std::vector<std::string> bubble, memory, flight;
  double mean = 0;
  for (std::size_t s = 0; s < all.size(); s += mine.size()) {
    mean += all[s] / grid_.pp;
    bubble.push_back(fmt::format("{:.0f}%", 100 * all[s]));
    memory.push_back(nn::format_bytes(all[s + 1]));
    flight.push_back(fmt::format("{:.0f}", all[s + 2]));
  }
  const int p = grid_.pp, m = shape_.micro_batches, v = shape_.virtual_stages;
  facts.note = fmt::format(
      "        bubble {:.0f}% measured (stages {}), {:.0f}% by the formula {} | peak activations {} | {} in flight ≤ {}",
      100 * mean, fmt::join(bubble, " "), 100.0 * (p - 1) / (v * m + p - 1),
      v == 1 ? "(p−1)/(M+p−1)" : "(p−1)/(v·M+p−1)", fmt::join(memory, " "),
      v == 1 ? "micro-batches" : "chunk micro-batches", fmt::join(flight, " "));
  window_times_ = {};
  window_peak_bytes_ = 0;
  window_peak_in_flight_ = 0;
  return facts;
}

}  // namespace trainers
