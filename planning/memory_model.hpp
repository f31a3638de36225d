// What one rank holds at the step's peak, by kind — from the formulas the trainers log and
// test (nn/memory_estimate for the activations, parallel::zero_formula_held for the state),
// not a second copy of them. Under the megatron implementation the activations are
// Korthikanti et al.'s (planning/megatron_activations.hpp) and the state mixed precision's
// 16 bytes a parameter (Rajbhandari et al. 2020, ZeRO §3.1: fp16 parameter and gradient,
// fp32 master copy and Adam's two moments).
//
//   parameters, gradients, optimizer   the rank's slice (tp), stage (pp) and shard (ZeRO);
//                 the gradients only where they exist at the peak (not under GPipe, whose
//                 peak ends the forwards, nor for one tensor-parallel micro-batch)
//   activations   what forward keeps × the micro-batches in flight on the stage:
//                 1 without a pipeline; 1F1B min(M, p − stage); GPipe all v·M chunk
//                 micro-batches (M micro-batches' worth); interleaved
//                 min(v·M, 2(p − stage − 1) + (v − 1)p + 1) chunk micro-batches
//                 (parallel/pp/schedule_*.cpp); under bf16 the step's cast weights
//   buffers       what backward and the strategy add at the peak (docs/planning.md): the
//                 gradients in flight, a recomputed block's replay, data parallelism's flat
//                 buckets, ZeRO-3's gathered parameters, a pipeline's message buffers
#pragma once
#include "parallel/dp/zero_optimizer.hpp"
#include "planning/layout.hpp"
#include "planning/workload.hpp"

namespace planning {

struct RankMemory {
  int stage = 0;  // which pipeline stage's rank this is
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0, buffers = 0;
  double total() const { return parameters + gradients + optimizer + activations + buffers; }
};

// Micro-batches (chunk micro-batches when interleaved) a stage keeps at once.
int64_t micro_batches_in_flight(const Workload& w, const Layout& layout, int stage);
RankMemory stage_memory(const Workload& w, const Layout& layout, int stage);
// A rank's parameters, gradients and AdamW state by ZeRO's formula, each role over the ranks
// replicating it (parallel/dp/zero_by_role.hpp): dense over dp × cp, experts over dp / ep.
parallel::HeldBytes zero_held_by_role(const Workload& w, const Layout& layout, int stage);
RankMemory peak_rank_memory(const Workload& w, const Layout& layout);  // the stage that holds most

}  // namespace planning
