// What train_pp and train_3d share: the schedule's flags, and a step that cuts the replica's
// batch into M micro-batches and runs their forwards and backwards through the stages under
// a schedule (parallel/pp/schedule_gpipe.cpp, parallel/pp/schedule_1f1b.cpp), activations passed along by the
// pipeline stage (parallel/pp/stage.hpp). After each log line, the bubble: each stage's share
// of waiting beside the formula (p−1)/(M+p−1), its peak activations, micro-batches in flight.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "comm/cli_forward.hpp"

#include "parallel/pp/schedule.hpp"
#include "parallel/pp/stage.hpp"
#include "trainers/batches.hpp"
#include "trainers/grid_model.hpp"

namespace trainers {

struct ScheduleOptions {
  parallel::Schedule schedule = parallel::Schedule::one_f_one_b;
  int skip_send_at_step = -1;  // testing (train_pp): rank --crash-rank skips its sends at this step
  int skip_ring_at_step = -1;  // testing (train_3d --cp): rank --crash-rank skips the attention ring at this step
  int skip_dispatch_at_step = -1;  // testing (train_3d --ep): rank --crash-rank skips the experts' dispatch
};
// --schedule into `s`; --micro-batches and --virtual-stages into the layout (not given: 0, then
// the default that fits it, parallel::Layout::default_micro_batches).
void add_schedule_flags(CLI::App& app, ScheduleOptions& s, parallel::Layout& layout);
// The layout's micro-batches when none were asked for; then --grad-accum refused (the
// micro-batches are the accumulation) and the layout checked against the run (one line).
void settle_pipeline_layout(GridShape& shape, const RunStart& run, int world_size, const std::string& program);

// The testing faults `s` asks of this rank (--crash-rank's), for its layers.
LayerFaults faults_of(const ScheduleOptions& s, const TrainOptions& o, int world_rank);

class PipelineStrategy : public GridStrategy {
 public:
  PipelineStrategy(const RunStart& run, comm::Communicator& world, const GridShape& shape, uint64_t seed,
                   const ScheduleOptions& s);

  // The batch, the trace's rows and the groups; train_pp and train_3d add their layout lines.
  StrategyFacts facts() const override;
  void forward_backward(int64_t step, StepClock& clock) override;
  // The dp averaging overlaps the last micro-batch's backward as in train_dp (--ddp bucketed):
  // each bucket is sent as backward completes it; then the grid's one finishing path.
  float finish_gradients(float max_norm) override;
  // The loss (on the last stage: shared along the pipeline, averaged over replicas) and the
  // bubble line.
  LogFacts log_facts() override;

 protected:
  // Micro-batch m's place in the step's global batch: this replica's rows [m·b, (m+1)·b).
  nn::DropoutBatch dropout_batch(int64_t step, int m) const;
  // ", interleaved over 2 chunks per stage (blocks 0-1 | 4-5 on stage 0)"-like, or "" (V = 1).
  std::string virtual_stages_note() const;
  const char* replicas_are_ = "replica(s)";  // the batch line's word for the dp replicas

  const ScheduleOptions s_;
  BatchSampler sampler_;
  Batch batch_;
  parallel::PipelineStage stage_;
  std::unique_ptr<parallel::GradientAverager> averager_;  // null with one replica

 private:
  // The bubble and the activations, summed over the steps since the last log line.
  parallel::StageTimes window_times_;
  std::size_t window_peak_bytes_ = 0;
  int window_peak_in_flight_ = 0;
};

}  // namespace trainers
