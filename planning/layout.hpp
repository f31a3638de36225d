// One way to lay a workload on its devices: dp × pp × cp × tp ranks (tensor-parallel ranks next
// to each other, then the context-parallel ranks of a sequence, then the pipeline's stages, then
// the replicas: the trainers' grid, parallel/grid.hpp), the pipeline's schedule and virtual
// stages, how attention crosses the cp ranks, ZeRO's stage, what is recomputed, and the
// micro-batch.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "nn/recompute.hpp"
#include "parallel/layout.hpp"
#include "planning/workload.hpp"

namespace planning {

enum class Schedule { gpipe, one_f_one_b, interleaved };
inline constexpr std::array<std::string_view, 3> kScheduleNames = {"gpipe", "1f1b", "interleaved"};
inline std::string_view name_of(Schedule s) { return kScheduleNames[static_cast<std::size_t>(s)]; }

// How attention sees the other context-parallel ranks' positions: the trainers' own
// (parallel/layout.hpp).
using parallel::CpAttention;
using parallel::kCpAttentionNames;

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int cp = 1;  // context-parallel ranks per sequence (train_3d --cp), each with T/cp positions
  int ep = 1;  // expert-parallel ranks (train_3d --ep): ep of the dp ranks share the experts, E/ep each
  // Beside tp, each expert cut over the tp ranks (Megatron's expert tensor parallelism) instead
  // of the tp ranks folded into the experts' group (what the trainers run): planned only, to
  // compare the two (docs/3d_parallelism.md, "Experts beside tensor parallelism").
  bool expert_tensor_parallel = false;
  CpAttention cp_attention = CpAttention::ring;
  int virtual_stages = 1;  // chunks of blocks per stage (interleaved 1F1B when > 1)
  Schedule schedule = Schedule::one_f_one_b;
  bool sequence_parallel = false;
  int zero = 0;  // ZeRO stage over the dp group
  nn::Recompute recompute = nn::Recompute::none;
  int micro_batch = 1;  // sequences per micro-batch

  int64_t ranks() const { return static_cast<int64_t>(dp) * tp * pp * cp; }
  // The ranks of one dispatch (the all-to-all's group): ep dp ranks with their tp ranks folded
  // in (parallel/grid.hpp), E/(ep·tp) whole experts each; with the experts cut over tp instead,
  // the ep ranks of one tp rank, each holding a 1/tp slice of E/ep experts. Either way a rank
  // holds E/(ep·tp) experts' worth of parameters.
  int expert_ranks() const { return expert_tensor_parallel ? ep : ep * tp; }
  // The ranks holding the same experts, over which their gradients average: the other ep
  // groups' dp ranks and every cp rank (parallel/grid.hpp's expert_dp_group).
  int64_t expert_replicas() const { return static_cast<int64_t>(dp / ep) * cp; }
  // The ranks that average each weight's gradient: the replicas and their cp ranks.
  int64_t gradient_group() const { return static_cast<int64_t>(dp) * cp; }
  // Positions of a sequence one rank holds.
  int64_t positions(const Workload& w) const { return w.model.block_size / cp; }
  // Micro-batches a replica runs per step (train_dp: accumulation steps; a pipeline: M).
  int64_t micro_batches(const Workload& w) const { return w.global_batch / (static_cast<int64_t>(dp) * micro_batch); }
  // "dp 2 · tp 2 sp · pp 2 1f1b · none · 4 × 3" (" · cp 2 ring" after pp with context
  // parallelism; "dp 4 ep 2" with expert parallelism)
  std::string describe(const Workload& w) const;
  // The trainers' layout value for this one (parallel/layout.hpp): the degrees, and the
  // micro-batches as a count.
  parallel::Layout grid(const Workload& w) const;
  // Why this layout cannot run the workload ("" when it can): the trainers' own rules, in their
  // own words (parallel::Layout::why_not: the grid, heads, sequence, experts, micro-batches,
  // what computes exactly), after the batch the micro-batches share and what the megatron
  // implementation was planned without; then the planner's own (blocks even over the chunks,
  // a schedule with its virtual stages).
  std::string impossible(const Workload& w) const;
  // The nanodist command that runs it, for this machine's runs (docs/planning.md); "" when the
  // model's vocabulary is not the trainers' (65 characters).
  std::string trainer_command(const Workload& w) const;
};

}  // namespace planning
