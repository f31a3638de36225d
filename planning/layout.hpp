// One way to lay a workload on its devices: dp × tp × pp ranks (tensor-parallel ranks next
// to each other, then the pipeline's stages, then the replicas: the trainers' grid,
// parallel/grid.hpp), the pipeline's schedule and virtual stages, ZeRO's stage, what is
// recomputed, and the micro-batch.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "nn/recompute.hpp"
#include "planning/workload.hpp"

namespace planning {

enum class Schedule { gpipe, one_f_one_b, interleaved };
inline constexpr std::array<std::string_view, 3> kScheduleNames = {"gpipe", "1f1b", "interleaved"};
inline std::string_view name_of(Schedule s) { return kScheduleNames[static_cast<std::size_t>(s)]; }

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int virtual_stages = 1;  // chunks of blocks per stage (interleaved 1F1B when > 1)
  Schedule schedule = Schedule::one_f_one_b;
  bool sequence_parallel = false;
  int zero = 0;  // ZeRO stage over the dp group (nanodist: train_dp only)
  nn::Recompute recompute = nn::Recompute::none;
  int micro_batch = 1;  // sequences per micro-batch

  int64_t ranks() const { return static_cast<int64_t>(dp) * tp * pp; }
  // Micro-batches a replica runs per step (train_dp: accumulation steps; a pipeline: M).
  int64_t micro_batches(const Workload& w) const { return w.global_batch / (static_cast<int64_t>(dp) * micro_batch); }
  // "dp 2 · tp 2 sp · pp 2 1f1b · zero 0 · recompute none · 4 × 3"
  std::string describe(const Workload& w) const;
  // Why this layout cannot run the workload ("" when it can): the degrees' product, the heads
  // tp must divide, the blocks the stages share, the batch the micro-batches share, and what
  // the implementation supports (nanodist: ZeRO with pure data parallelism only).
  std::string impossible(const Workload& w) const;
  // The nanodist command that runs it, for this machine's runs (docs/planning.md); "" when the
  // model's vocabulary is not the trainers' (65 characters).
  std::string trainer_command(const Workload& w) const;
};

}  // namespace planning
