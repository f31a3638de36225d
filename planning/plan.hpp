// The sweep: every layout of a workload on a machine, with its memory and step time, the
// ones that fit first and fastest first. What the user fixes (`--tp 2`, `--recompute full`)
// the sweep keeps; the rest it tries.
#pragma once
#include <optional>
#include <vector>

#include "planning/layout.hpp"
#include "planning/machine.hpp"
#include "planning/memory_model.hpp"
#include "planning/time_model.hpp"
#include "planning/workload.hpp"

namespace planning {

struct LayoutChoices {
  std::optional<int> dp, tp, pp, cp, ep, virtual_stages, zero, micro_batch;
  std::optional<Schedule> schedule;
  std::optional<CpAttention> cp_attention;
  std::optional<bool> sequence_parallel;
  bool expert_tensor_parallel = false;  // plan the experts cut over tp (a comparison the trainers do not run)
  std::optional<nn::Recompute> recompute;
  int max_micro_batch = 64;  // the sweep's largest micro-batch (a fixed --micro-batch may exceed it)
};

struct PlannedLayout {
  Layout layout;
  RankMemory memory;  // the rank that holds most
  StepTime time;
  bool fits = false;        // in the device's memory (a CPU: the node's, shared by its ranks)
  double tokens_per_s = 0;  // global batch × T / step
  double mfu = 0;           // the model's FLOPs per second over the devices' peak
};

PlannedLayout evaluate(const Workload& w, const Layout& layout, const Machine& machine);
// Every layout `choices` allows that can run `w`: those that fit, fastest first; then those
// that do not, smallest first.
std::vector<PlannedLayout> sweep(const Workload& w, const Machine& machine, const LayoutChoices& choices);

}  // namespace planning
