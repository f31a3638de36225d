// How long one optimizer step takes on a layout, by part (docs/planning.md):
//
//   compute     the rank's FLOPs (forward 2 per weight per token plus attention's 4·T·C a
//               block; backward twice forward; the replayed forward of `recompute`) at the
//               machine's achieved FLOP/s, plus, where the machine gives a memory bandwidth,
//               the elementwise work: 5 passes over what forward keeps (7 with a replay);
//               and each block's fixed cost per micro-batch (what makes small ones slow)
//   tp          a block's two all-reduces forward and two backward of a [b,T,C] activation
//               (sequence parallelism: reduce-scatter + all-gather, the same bytes), two
//               more when the block is replayed; the embedding's and the head's
//   cp          context parallelism, per block and micro-batch: ring attention sends the rank's
//               K and V ([b,T/c,2C/t]) c−1 times forward and again backward, hidden behind
//               the attention it computes meanwhile where they fit, and dK, dV c times (not
//               hidden); Ulysses four all-to-alls (q|k|v and the output, forward and backward),
//               never hidden
//   ep          expert parallelism, per mixture block and micro-batch: the rows' dispatch and
//               combine, all-to-alls of the rank's k·b·T rows of C forward, again backward
//               (and in a replay), plus the counts' small one; never hidden
//   pp          a send forward and one backward per micro-batch and chunk
//   bubble      (p − 1)/v of a micro-batch's stage time (GPipe and 1F1B alike)
//   dp          the gradients' allreduce over dp × cp (ZeRO: reduce-scatter and all-gather) — hidden
//               behind backward where the trainer overlaps it (bucketed averaging: all but
//               the last bucket; ZeRO-3: its prefetched gathers behind compute); with ep, the
//               experts' over the dp/ep ranks holding them and the rest over dp, after backward
//   optimizer   AdamW over the rank's shard
//   time sharing  on a CPU with more ranks than cores: the step lasts at least every rank's
//               work (all but the bubble) over the cores
#pragma once
#include <string>
#include <vector>

#include "planning/collective_cost.hpp"
#include "planning/layout.hpp"
#include "planning/machine.hpp"
#include "planning/workload.hpp"

namespace planning {

struct StepTime {
  double compute = 0;        // forward, backward and the replay, seconds
  double tp = 0;             // tensor-parallel collectives (never hidden)
  double cp = 0;             // context parallelism's transfers not hidden by attention's compute
  double cp_overlapped = 0;  // … hidden (the ring's K and V)
  double ep = 0;             // expert parallelism's all-to-alls (never hidden)
  double pp = 0;             // the pipeline's sends
  double bubble = 0;         // the pipeline's idle slots
  double dp_exposed = 0;     // gradient averaging (or ZeRO's collectives) not hidden by compute
  double dp_overlapped = 0;  // … hidden behind backward
  double optimizer = 0;
  double time_sharing = 0;   // a CPU with more ranks than cores: waiting for a core
  std::string tp_algorithm, cp_algorithm, ep_algorithm, dp_algorithm;  // the algorithm each group's collective uses
  double total() const { return compute + tp + cp + ep + pp + bubble + dp_exposed + optimizer + time_sharing; }
};

// Training FLOPs of one token through the whole model, forward + backward (+ the replay).
double training_flops_per_token(const nn::GPTConfig& model, nn::Recompute recompute);
// The model's FLOPs alone (no replay): for a step's achieved FLOP/s and MFU.
double model_flops_per_step(const Workload& w);

StepTime step_time(const Workload& w, const Layout& layout, const Machine& machine);

// How the ranks of each group sit on the nodes (the grid: tp fastest, then cp, then pp, then
// dp): a group of `size` ranks `stride` apart has devices_per_node / stride of them on a node
// (at least 1), so it spans more than one node as soon as size × stride exceeds a node. The
// gradients' group is the replicas and their cp ranks (dp × cp).
struct Groups {
  GroupShape tp, cp, pp, dp;
  GroupShape ep, expert_dp;  // one dispatch's ranks (tp folded in); the ranks holding the same experts
  bool pp_inside_a_node = true, cp_inside_a_node = true;
};
Groups groups_of(const Layout& l, const Machine& m);

}  // namespace planning
