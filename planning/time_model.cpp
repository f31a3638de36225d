#include "planning/time_model.hpp"

#include <algorithm>

#include "nn/memory_estimate.hpp"
#include "planning/megatron_activations.hpp"

namespace planning {
namespace {

// Forward FLOPs of one token through one block: 2 per weight (12C²) and attention's q·k and
// p·v (2·2·T·C, every position counted as nanoGPT and Megatron's Eq. 3 count them).
double block_forward_flops(const nn::GPTConfig& c) {
  const double C = c.n_embd, T = c.block_size;
  return 24 * C * C + 4 * T * C;
}
double attention_core_forward_flops(const nn::GPTConfig& c) { return 4.0 * c.block_size * c.n_embd; }
double head_forward_flops(const nn::GPTConfig& c) { return 2.0 * c.n_embd * c.vocab_size; }

double replay_flops(const nn::GPTConfig& c, nn::Recompute recompute) {
  if (recompute == nn::Recompute::full) return block_forward_flops(c);
  if (recompute == nn::Recompute::selective) return attention_core_forward_flops(c);
  return 0;
}

// How the ranks of each group sit on the nodes (the grid: tp fastest, then pp, then dp): a
// group of `size` ranks `stride` apart has devices_per_node / stride of them on a node (at
// least 1), so it spans more than one node as soon as size × stride exceeds a node.
struct Groups {
  GroupShape tp, pp, dp;
  bool pp_inside_a_node = true;
};
Groups groups_of(const Layout& l, const Machine& m) {
  auto shape = [&](int size, int64_t stride) {
    if (m.ranks_share_devices) return GroupShape{size, size};  // a CPU: one node
    return GroupShape{size, static_cast<int>(std::clamp<int64_t>(m.devices_per_node / stride, 1, size))};
  };
  Groups g{shape(l.tp, 1), shape(l.pp, l.tp), shape(l.dp, static_cast<int64_t>(l.tp) * l.pp)};
  g.pp_inside_a_node = g.pp.nodes() == 1;
  return g;
}


// Bytes the elementwise work moves per token of a block on one rank: 5 passes over what
// forward keeps without recompute (written and its inputs read in forward; read, its gradient
// written and read in backward), 2 more for a replayed forward.
double elementwise_bytes_per_token(const Workload& w, const Layout& l) {
  const auto& c = w.model;
  double kept = 0;
  if (w.implementation == Implementation::megatron)
    kept = megatron_layer_activation_bytes(c, 1, l.tp, l.sequence_parallel, nn::Recompute::none) / c.block_size;
  else
    kept = 4 * nn::block_activation_floats_per_token(c, c.block_size, nn::Recompute::none, w.precision, l.tp,
                                                     l.sequence_parallel);
  const double passes = l.recompute == nn::Recompute::full ? 7 : 5;
  return kept * passes;
}

}  // namespace

double training_flops_per_token(const nn::GPTConfig& c, nn::Recompute recompute) {
  return c.n_layer * (3 * block_forward_flops(c) + replay_flops(c, recompute)) + 3 * head_forward_flops(c);
}

double model_flops_per_step(const Workload& w) {
  return training_flops_per_token(w.model, nn::Recompute::none) * static_cast<double>(w.global_batch) *
         w.model.block_size;
}

StepTime step_time(const Workload& w, const Layout& l, const Machine& machine) {
  const auto& c = w.model;
  const Groups groups = groups_of(l, machine);
  const double m = static_cast<double>(l.micro_batches(w)), v = l.virtual_stages, p = l.pp;
  const double tokens = static_cast<double>(l.micro_batch) * c.block_size;  // a micro-batch's
  const double activation_bytes = w.implementation == Implementation::megatron ? 2 : 4;
  const double message = tokens * c.n_embd * activation_bytes;  // one [b,T,C] activation
  const double blocks = static_cast<double>(c.n_layer) / l.pp;

  // One micro-batch on the busiest stage (the last: its blocks and the head).
  const double flops = tokens * (blocks * (3 * block_forward_flops(c) + replay_flops(c, l.recompute)) +
                                 3 * head_forward_flops(c)) / l.tp;
  // A device's achieved rate (on a CPU mpiexec binds each rank to a core, its threads share it).
  double compute_mb = flops / machine.achieved_flops(w.precision);
  // A block's fixed cost per micro-batch (a replayed block pays its forward's share again).
  compute_mb += blocks * machine.block_overhead_s * (l.recompute == nn::Recompute::full ? 4.0 / 3.0 : 1.0);
  if (machine.memory_bytes_per_s > 0)
    compute_mb += tokens * blocks * elementwise_bytes_per_token(w, l) / machine.memory_bytes_per_s;

  // Tensor parallelism: per block 2 forward + 2 backward (+ 2 replayed) all-reduces of the
  // activation; the embedding's and lm_head's input gradient: 2 more.
  double tp_mb = 0;
  StepTime t;
  if (l.tp > 1) {
    const CollectiveCost one = allreduce_cost(groups.tp, message, machine);
    const double per_block = l.recompute == nn::Recompute::full ? 6 : 4;
    tp_mb = (blocks * per_block + 2) * one.seconds;
    t.tp_algorithm = name_of(one.algorithm);
  }
  // The pipeline: each micro-batch's chunk sends its activation on and its gradient back.
  // Megatron's scatter/gather optimisation sends 1/t of it from each tp rank.
  double pp_mb = 0;
  if (l.pp > 1) {
    const double bytes = w.implementation == Implementation::megatron ? message / l.tp : message;
    pp_mb = 2 * v * send_cost(groups.pp_inside_a_node, bytes, machine).seconds;
  }
  const double stage_mb = compute_mb + tp_mb + pp_mb;
  t.compute = m * compute_mb;
  t.tp = m * tp_mb;
  t.pp = m * pp_mb;
  t.bubble = l.pp > 1 ? (p - 1) / v * stage_mb : 0;

  // Data parallelism over the replicas.
  const double P = rank_parameter_count(c, l.tp, l.pp, l.pp - 1);
  if (l.dp > 1) {
    const double gradient_bytes = P * (w.implementation == Implementation::megatron ? 2 : 4);
    const double backward_of_last = compute_mb * 2.0 / 3.0;  // the last micro-step's backward
    if (l.zero == 0) {
      const CollectiveCost all = allreduce_cost(groups.dp, gradient_bytes, machine);
      t.dp_algorithm = name_of(all.algorithm);
      // Bucketed averaging (every nanodist trainer; Megatron's torch DDP, which its rows
      // without a pipeline used) starts each bucket as the last micro-batch's backward fills
      // it: all but the last 1 MB bucket can hide.
      const bool overlaps = w.implementation == Implementation::megatron ? l.pp == 1 : true;
      const double last_bucket = allreduce_cost(groups.dp, std::min(gradient_bytes, 1e6), machine).seconds;
      t.dp_overlapped = overlaps ? std::clamp(all.seconds - last_bucket, 0.0, backward_of_last) : 0;
      t.dp_exposed = all.seconds - t.dp_overlapped;
    } else {
      // ZeRO (parallel/dp/zero_optimizer): each group's gradients are reduce-scattered as
      // backward makes them (stage 1: the last micro-step's; 2 and 3: every micro-step's), all
      // but the last group hidden as the buckets are; the parameters are all-gathered after the
      // update (stage 1 and 2: exposed) or before each use forward and backward (stage 3:
      // prefetched behind the compute, but the first).
      const CollectiveCost scatter = reduce_scatter_cost(groups.dp, gradient_bytes, machine);
      const CollectiveCost gather = allgather_cost(groups.dp, 4 * P, machine);
      const double last_group = reduce_scatter_cost(groups.dp, std::min(gradient_bytes, 1e6), machine).seconds;
      t.dp_algorithm = name_of(scatter.algorithm);
      const double scatters = l.zero >= 2 ? m : 1, gathers = l.zero == 3 ? 2 * m : 1;
      const double scatter_hidden = scatters * std::clamp(scatter.seconds - last_group, 0.0, backward_of_last);
      const double first_group = gather.seconds / (c.n_layer + 1);  // a block's share (and the embedding's)
      const double gather_hidden =
          l.zero == 3 ? std::clamp(gathers * gather.seconds - first_group, 0.0, t.compute) : 0;
      t.dp_overlapped = scatter_hidden + gather_hidden;
      t.dp_exposed = scatters * scatter.seconds + gathers * gather.seconds - t.dp_overlapped;
    }
  }
  const double optimizer_parameters = l.zero >= 1 ? P / l.dp : P;
  t.optimizer = optimizer_parameters * machine.optimizer_seconds_per_parameter;
  // More ranks than cores take turns: the step lasts at least all ranks' work over the cores.
  // A rank idle in the bubble lends its core to another, so the turns absorb the bubble first;
  // communication hidden behind compute still copies on a core of the CPU, so it counts.
  if (machine.ranks_share_devices && l.ranks() > machine.devices_per_node) {
    const double busy = t.total() - t.bubble + t.dp_overlapped;
    t.time_sharing =
        std::max(0.0, busy * static_cast<double>(l.ranks()) / machine.devices_per_node - t.total());
  }
  return t;
}

}  // namespace planning
