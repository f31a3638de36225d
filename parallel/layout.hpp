// A job's layout as one value — the degrees (dp, pp and its virtual stages, cp and its
// attention, tp and sequence parallelism, ep), the micro-batches and ZeRO's stage — and the one
// function that says why it cannot run a model on N ranks. The trainers (check before they
// build), the grid (parallel/grid.hpp), the planner (planning/layout.hpp) and the launcher
// (launcher/nanodist-run, which asks a trainer's --layout-query) all ask it, so each rule is
// written here and only here, and says the same line wherever it is met.
//
//   world rank = ((dp_rank · pp + pp_rank) · cp + cp_rank) · tp + tp_rank      (tp fastest)
//   ep_rank    = dp_rank mod ep                                                (ep consecutive dp ranks)
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nn/compute_modes.hpp"
#include "nn/gpt.hpp"

namespace parallel {

// --cp-attention: how attention sees the other context-parallel ranks' positions (parallel/cp/):
// keys and values round a ring, or two all-to-alls between a sequence shard and a head shard.
enum class CpAttention { ring, ulysses };
inline constexpr std::array<std::string_view, 2> kCpAttentionNames = {"ring", "ulysses"};

// What a layout is asked to run.
struct LayoutJob {
  const nn::GPTConfig& model;
  int world_size = 1;
  int64_t replica_batch = 0;  // sequences a replica takes a step (--batch-size; 0: no training batch, the
                              // micro-batch rules do not apply)
  nn::Precision precision = nn::Precision::fp32;
  nn::AttentionKernel attention = nn::AttentionKernel::fused;
};

// A rank's coordinates in the grid.
struct GridPlace {
  int dp = 0, pp = 0, cp = 0, tp = 0;
};

struct Layout {
  int dp = 1, pp = 1, cp = 1, tp = 1;
  int ep = 1;                  // ep consecutive dp ranks share one copy of the experts, E/ep each
  int virtual_stages = 1;      // chunks of blocks per stage (interleaved 1F1B when > 1)
  std::vector<int> stage_layers;  // blocks per chunk in model order; empty: even
  CpAttention cp_attention = CpAttention::ring;
  bool sequence_parallel = false;
  int micro_batches = 1;  // a replica's batch cut into M micro-batches a step
  int zero = 0;           // ZeRO's stage over the replicas of each parameter (train_dp; train_3d: 1-2)

  // dp·pp·cp·tp in a double (the product of four ints overflows an int; exact below 2^53).
  double ranks() const { return static_cast<double>(dp) * pp * cp * tp; }
  // The ranks of one replica: every rank but the data-parallel ones.
  int model_parallel() const { return pp * cp * tp; }
  GridPlace place_of(int world_rank) const {
    return {world_rank / (pp * cp * tp), world_rank / (cp * tp) % pp, world_rank / tp % cp, world_rank % tp};
  }

  // Why these degrees cannot be a grid of `world_size` ranks; "" when they can.
  std::string why_not(int world_size) const;
  // Why this layout cannot run `job`: the grid, the heads and the sequence each degree splits,
  // the blocks the stages share, the batch the micro-batches share, the experts, and what the
  // implementation computes exactly (ring attention in fp32); "" when it can.
  std::string why_not(const LayoutJob& job) const;
  // The same, as comm::UsageError (one line, exit 2).
  void check(const LayoutJob& job) const;
  void check(int world_size) const;

  // The blocks of each of the pp·V chunks in model order (V = 1: of each stage): stage_layers,
  // or even. Throws comm::UsageError naming the rule (V > 1 needs pp ≥ 2, a block per chunk).
  std::vector<int> chunk_layers(int n_layer) const;

  // The micro-batches that fit when none were asked for: 1 without a pipeline; with one, 4 if
  // they divide the batch (and, interleaved, are a multiple of pp), else the most that do up to
  // 4 (or pp).
  static int default_micro_batches(int pp, int virtual_stages, int64_t replica_batch);

  // This layout on `ranks` ranks with the global batch kept: the model-parallel part as it is,
  // dp = ranks / (pp·cp·tp), each replica's batch and micro-batches scaled by the old dp over the
  // new; ep kept, or, with fewer replicas than ep, the largest that divides them (a checkpoint
  // holds every expert whole, so any ep resumes it). `why` (when it cannot) names the rule; a
  // shrunk layout must still pass why_not.
  struct Moved;
  Moved on(int ranks, int64_t replica_batch) const;
};

struct Layout::Moved {
  Layout layout;
  int64_t replica_batch = 0;
  std::string why;  // "" when it moved
};

}  // namespace parallel
