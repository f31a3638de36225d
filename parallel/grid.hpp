// The ranks of a job as a grid of coordinates (dp, pp, cp, tp), tensor-parallel rank fastest:
//
//   world rank = ((dp_rank · pp + pp_rank) · cp + cp_rank) · tp + tp_rank
//
//   --dp 2 --pp 2 --tp 2, 8 ranks:   rank 0 = dp 0 · pp 0 · tp 0    rank 1 = dp 0 · pp 0 · tp 1
//                                    rank 2 = dp 0 · pp 1 · tp 0    rank 3 = dp 0 · pp 1 · tp 1
//                                    rank 4 = dp 1 · pp 0 · tp 0    …
//
// Why this order: tensor-parallel ranks talk most (two all-reduces of every block's
// activations, forward and backward), so they are neighbours — on one node, ideally one
// NVLink island; context-parallel ranks next (keys and values round the ring in every
// layer, forward and backward: parallel/cp/); pipeline neighbours exchange one activation per
// micro-batch; data-parallel replicas only meet once per step, for the gradients. Each rank is
// in four groups, each from Communicator::split: tp_group (same dp, pp, cp: one stage's
// tensor-parallel ranks), cp_group (same dp, pp, tp: the ranks sharing one sequence),
// pp_group (same dp, cp, tp: one pipeline, passing activations along) and dp_group (same pp,
// tp: every rank that holds the same parameters — the dp replicas and, in each, the cp ranks,
// whose gradients are averaged together in one collective: a cp rank's loss is the mean over
// its positions, so the average over cp is the mean over the whole sequence).
//
// Expert parallelism carves two more groups out of the dp ranks (DeepSpeed-MoE): ep_group, ep
// consecutive dp ranks (dp ranks 0…ep−1, ep…2ep−1, …), which share one copy of every expert
// among them (each holds E/ep, parallel/ep/), and expert_dp_group, the dp ranks holding the
// same experts (dp ranks r, r+ep, r+2ep, …, with their cp ranks), over which those experts'
// gradients are averaged.
// With tp > 1 the tp ranks are folded in (Megatron core's MoE parallel folding): an ep group
// is those dp ranks with all their tp ranks, ep·tp ranks holding E/(ep·tp) experts each
// (parallel/ep/tensor_parallel_folding.hpp); its rank order is dp rank, then tp rank.
//
//   --dp 4 --ep 2:         ep groups {dp 0, dp 1} {dp 2, dp 3}    expert-dp groups {dp 0, dp 2} {dp 1, dp 3}
//   --dp 2 --ep 1 --tp 2:  ep groups {tp 0, tp 1} of each dp rank  expert-dp groups {dp 0, dp 1} of each tp rank
#pragma once
#include <string>

#include "comm/communicator.hpp"
#include "nn/parameter_role.hpp"
#include "parallel/layout.hpp"

namespace parallel {

struct Grid {
  int dp = 1, pp = 1, cp = 1, tp = 1;
  int dp_rank = 0, pp_rank = 0, cp_rank = 0, tp_rank = 0;
  comm::Communicator tp_group;
  comm::Communicator cp_group;
  comm::Communicator pp_group;
  comm::Communicator dp_group;  // dp × cp ranks: the same parameters (but for the experts, with ep > 1)
  int ep = 1, ep_rank = 0;      // expert parallelism: ep divides dp; ep_rank = (dp_rank mod ep)·tp + tp_rank
  comm::Communicator ep_group;         // same (pp, cp), dp ranks ep·⌊dp_rank/ep⌋ … +ep−1, every tp rank
  comm::Communicator expert_dp_group;  // same (pp, tp) and ep_rank, every cp rank: the same experts (ep 1: dp's ranks)
  // Every stage's ep group of the first copy (in_first_copy), pp stage 0 / ep rank 0 first: the
  // ranks a checkpoint collects the whole model from — each stage's tp rank 0 the stage, every
  // rank its own experts (the others: a group of their own, unused).
  comm::Communicator checkpoint_group;

  // Throws comm::UsageError with the layout's own line (Layout::why_not) when its degrees cannot
  // be a grid of world's ranks.
  static Grid make(comm::Communicator& world, const Layout& layout);
  // ---- parameters by role (nn::ParameterRole): what happens to a parameter follows from its role,
  // not from a branch on a dimension (Megatron's distributed optimizer; "MoE parallel folding").
  // The ranks holding the same copy of it: its gradient is averaged over them, ZeRO would shard
  // its state over them, the start broadcast reaches them — dp × cp ranks for a dense parameter,
  // the expert-dp ranks (the same experts) for an expert.
  comm::Communicator& replicas_of(nn::ParameterRole role) {
    return role == nn::ParameterRole::expert && ep > 1 ? expert_dp_group : dp_group;  // (ep 1: the same ranks)
  }
  // How many ranks' losses its gradient already sums before that average: an expert's gradient
  // comes back from the dispatch's backward summed over the ep replicas whose tokens it computed
  // (with tp folded in, each replica's tp ranks sent a share of its tokens), so the mean over
  // all dp ranks is the expert-dp mean × 1/ep.
  int summed_before_averaging(nn::ParameterRole role) const { return role == nn::ParameterRole::expert ? ep : 1; }
  // Whether this rank's copy of it is the one a checkpoint takes (each ep rank holds its own
  // experts; the rest is the same on every dp rank of an ep group: its rank 0's, made whole
  // over tp).
  bool checkpoint_takes(nn::ParameterRole role) const { return role == nn::ParameterRole::expert || ep_rank == 0; }
  // Whether a forward needs ranks of other replicas with it (the ep group's dispatch): then
  // evaluation and sampling keep them in step.
  bool forwards_across_replicas() const { return ep > 1; }

  // The rank that speaks for its replica's data (writes, samples): dp 0, cp 0.
  bool first_replica() const { return dp_rank == 0 && cp_rank == 0; }
  // The ranks that hold the first whole copy of the model between them (and so run its
  // forwards together): the first replica, and its ep group when the experts are spread over one.
  bool in_first_copy() const { return dp_rank < ep && cp_rank == 0; }
  // "rank 5 = dp 1 · pp 0 · tp 1"; the cp part only when cp > 1, the tp part only when tp > 1.
  std::string describe(int world_rank) const;
  // Every rank, comma-separated, for the log's "layout:" line.
  std::string layout(int world_size) const;
};

}  // namespace parallel
