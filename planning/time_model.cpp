#include "planning/time_model.hpp"

#include <algorithm>

#include "nn/memory_estimate.hpp"
#include "planning/megatron_activations.hpp"
#include "planning/memory_model.hpp"

namespace planning {
namespace {

// Forward FLOPs of one token through one block: 2 per weight (12C²) and attention's q·k and
// p·v (2·2·T·C, every position counted as nanoGPT and Megatron's Eq. 3 count them).
double block_forward_flops(const nn::GPTConfig& c) {
  const double C = c.n_embd, T = c.block_size;
  // A mixture block (their share of the blocks, on average): k experts' 16C² and the router's
  // 2·E·C in place of the MLP's 16C².
  const double moe_share = c.n_experts > 0 ? static_cast<double>(c.n_layer / c.moe_every) / c.n_layer : 0.0;
  return 24 * C * C + 4 * T * C + moe_share * ((c.experts_per_token - 1) * 16 * C * C + 2.0 * c.n_experts * C);
}
double attention_core_forward_flops(const nn::GPTConfig& c) { return 4.0 * c.block_size * c.n_embd; }
double head_forward_flops(const nn::GPTConfig& c) { return 2.0 * c.n_embd * c.vocab_size; }

double replay_flops(const nn::GPTConfig& c, nn::Recompute recompute) {
  if (recompute == nn::Recompute::full) return block_forward_flops(c);
  if (recompute == nn::Recompute::selective) return attention_core_forward_flops(c);
  return 0;
}

}  // namespace

Groups groups_of(const Layout& l, const Machine& m) {
  auto shape = [&](int size, int64_t stride) {
    if (m.ranks_share_devices) return GroupShape{size, size};  // a CPU: one node
    return GroupShape{size, static_cast<int>(std::clamp<int64_t>(m.devices_per_node / stride, 1, size))};
  };
  const int64_t tp_cp = static_cast<int64_t>(l.tp) * l.cp;
  Groups g{shape(l.tp, 1), shape(l.cp, l.tp), shape(l.pp, tp_cp), shape(l.dp, tp_cp * l.pp)};
  // ep dp ranks with their tp ranks folded in: the tp ranks side by side, the dp ranks apart.
  const GroupShape ep_dp = shape(l.ep, tp_cp * l.pp);
  g.ep = l.expert_tensor_parallel ? ep_dp : GroupShape{l.expert_ranks(), g.tp.per_node * ep_dp.per_node};
  g.expert_dp = shape(static_cast<int>(l.expert_replicas()), l.tp * l.pp * l.ep);  // (cp ranks among them: approximate)
  g.dp = GroupShape{l.dp * l.cp, g.dp.per_node * g.cp.per_node};
  g.pp_inside_a_node = g.pp.nodes() == 1;
  g.cp_inside_a_node = g.cp.nodes() == 1;
  return g;
}

namespace {

// Context parallelism's transfers for one micro-batch on a stage of `blocks` blocks: those
// hidden behind attention's compute (`attention_s`: the stage's attention core) and the rest.
struct ContextTransfers {
  double exposed = 0, hidden = 0;
  Algorithm algorithm = Algorithm::none;
};
ContextTransfers context_transfers(const Workload& w, const Layout& l, const Groups& groups, const Machine& machine,
                                   double blocks, double attention_s) {
  if (l.cp == 1) return {};
  const double c = l.cp, C = w.model.n_embd;
  const double position_bytes = static_cast<double>(l.micro_batch) * l.positions(w) * 4 / l.tp;  // a float each
  if (l.cp_attention == CpAttention::ulysses) {
    // q|k|v [b,T/c,3C/t] there and back, the output [b,T/c,C/t] there and back.
    const double trades = 2 * (alltoall_cost(groups.cp, 3 * C * position_bytes, machine).seconds +
                               alltoall_cost(groups.cp, C * position_bytes, machine).seconds);
    return {.exposed = blocks * trades, .hidden = 0, .algorithm = Algorithm::pairwise};
  }
  // The ring: K and V [b,T/c,2C/t] c−1 times forward and c−1 backward (the next block's moving
  // while this one computes), dK and dV c times after each block's backward.
  const double hop = send_cost(groups.cp_inside_a_node, 2 * C * position_bytes, machine).seconds;
  const double kv = blocks * 2 * (c - 1) * hop, kept_hidden = std::min(kv, attention_s);
  return {.exposed = kv - kept_hidden + blocks * c * hop, .hidden = kept_hidden, .algorithm = Algorithm::point_to_point};
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
  const double message = tokens / l.cp * c.n_embd * activation_bytes;  // one [b,T/c,C] activation
  const double blocks = static_cast<double>(c.n_layer) / l.pp;

  // One micro-batch on the busiest stage (the last: its blocks and the head), the rank's
  // positions of it (T/c under context parallelism: each still attends to all T, so attention's
  // 4·T·C per position stays).
  const double rank_tokens = tokens / l.cp;
  const double flops = rank_tokens * (blocks * (3 * block_forward_flops(c) + replay_flops(c, l.recompute)) +
                                      3 * head_forward_flops(c)) / l.tp;
  // A device's achieved rate (on a CPU mpiexec binds each rank to a core, its threads share it).
  double compute_mb = flops / machine.achieved_flops(w.precision);
  // A block's fixed cost per micro-batch (a replayed block pays its forward's share again).
  compute_mb += blocks * machine.block_overhead_s * (l.recompute == nn::Recompute::full ? 4.0 / 3.0 : 1.0);
  if (machine.memory_bytes_per_s > 0)
    compute_mb += rank_tokens * blocks * elementwise_bytes_per_token(w, l) / machine.memory_bytes_per_s;

  // Tensor parallelism: per block 2 forward + 2 backward (+ 2 replayed) all-reduces of the
  // activation, half of them the MLP's (a mixture block's are its experts', counted with ep
  // below); the embedding's and lm_head's input gradient: 2 more.
  double tp_mb = 0;
  StepTime t;
  if (l.tp > 1) {
    const CollectiveCost one = allreduce_cost(groups.tp, message, machine);
    const double per_block = l.recompute == nn::Recompute::full ? 6 : 4;
    const double mixtures = c.n_experts > 0 ? moe_blocks_on_stage(c, l.pp, l.pp - 1, l.virtual_stages) : 0.0;
    tp_mb = ((blocks - mixtures) * per_block + mixtures * per_block / 2 + 2) * one.seconds;
    t.tp_algorithm = name_of(one.algorithm);
  }
  // The pipeline: each micro-batch's chunk sends its activation on and its gradient back.
  // Megatron's scatter/gather optimisation sends 1/t of it from each tp rank.
  double pp_mb = 0;
  if (l.pp > 1) {
    const double bytes = w.implementation == Implementation::megatron ? message / l.tp : message;
    pp_mb = 2 * v * send_cost(groups.pp_inside_a_node, bytes, machine).seconds;
  }
  // Context parallelism: attention's share of the compute (forward and backward) is what the
  // ring's K and V can hide behind.
  const double attention_s = rank_tokens * blocks * 3 * attention_core_forward_flops(c) / l.tp /
                             machine.achieved_flops(w.precision);
  const ContextTransfers cp_mb = context_transfers(w, l, groups, machine, blocks, attention_s);
  if (l.cp > 1) t.cp_algorithm = name_of(cp_mb.algorithm);
  // Expert parallelism: per mixture block, the dispatch and the combine of the rank's k rows a
  // token, forward and backward (and the replay's forward), and the counts before each dispatch.
  // With tp folded in each tp rank sends 1/tp of the rows, and the outputs come back to every tp
  // rank in an all-reduce forward (g), the rows' gradient in one backward (f):
  // parallel/ep/tensor_parallel_folding.hpp. With the experts cut over tp instead (planned
  // only) every tp rank sends all the rows, over the ep ranks of its tp rank, and each expert's
  // output is all-reduced over tp forward, its input's gradient backward.
  double ep_mb = 0;
  if (c.n_experts > 0 && (l.expert_ranks() > 1 || l.expert_tensor_parallel)) {
    const double moe_blocks = moe_blocks_on_stage(c, l.pp, l.pp - 1, l.virtual_stages);
    const double rows = rank_tokens * c.experts_per_token * c.n_embd * 4;
    const double sent = l.expert_tensor_parallel ? rows : rows / l.tp;
    const double forwards = l.recompute == nn::Recompute::full ? 2 : 1;
    if (l.expert_ranks() > 1) {
      const CollectiveCost trade = alltoall_cost(groups.ep, sent, machine);
      ep_mb = moe_blocks * (2 * (forwards + 1) * trade.seconds +
                            forwards * alltoall_cost(groups.ep, 8.0 * c.n_experts, machine).seconds);
      t.ep_algorithm = name_of(trade.algorithm);
    }
    if (l.expert_tensor_parallel)
      ep_mb += moe_blocks * (forwards + 1) * allreduce_cost(groups.tp, rows, machine).seconds;
    else if (l.tp > 1)
      ep_mb += moe_blocks * (forwards * allreduce_cost(groups.tp, rows, machine).seconds +
                             allreduce_cost(groups.tp, rank_tokens * c.n_embd * 4, machine).seconds);
  }
  const double stage_mb = compute_mb + tp_mb + cp_mb.exposed + ep_mb + pp_mb;
  t.compute = m * compute_mb;
  t.tp = m * tp_mb;
  t.cp = m * cp_mb.exposed;
  t.cp_overlapped = m * cp_mb.hidden;
  t.ep = m * ep_mb;
  t.pp = m * pp_mb;
  t.bubble = l.pp > 1 ? (p - 1) / v * stage_mb : 0;

  // Data parallelism over the replicas (and each one's cp ranks: they hold the same weights).
  const double P = rank_parameter_count(c, l.tp, l.pp, l.pp - 1, l.virtual_stages, l.ep);
  if (l.gradient_group() > 1 && l.ep > 1) {
    // train_3d --ep averages each role over its group, bucket by bucket as backward completes
    // it (parallel/dp/replicas_by_role.hpp): the experts' over expert_dp (none when dp = ep),
    // the rest over dp; all but each group's last 1 MB bucket can hide behind the last
    // micro-batch's backward.
    const double experts = expert_parameters_on_stage(c, l.pp, l.pp - 1, l.virtual_stages, l.ep * l.tp);
    const CollectiveCost rest = allreduce_cost(groups.dp, 4 * (P - experts), machine);
    const double expert_s = l.expert_replicas() > 1 ? allreduce_cost(groups.expert_dp, 4 * experts, machine).seconds : 0.0;
    const double last_buckets = allreduce_cost(groups.dp, std::min(4 * (P - experts), 1e6), machine).seconds +
                                (l.expert_replicas() > 1 ? allreduce_cost(groups.expert_dp, std::min(4 * experts, 1e6), machine).seconds : 0.0);
    t.dp_algorithm = name_of(rest.algorithm);
    t.dp_overlapped = std::clamp(rest.seconds + expert_s - last_buckets, 0.0, compute_mb * 2.0 / 3.0);
    t.dp_exposed = rest.seconds + expert_s - t.dp_overlapped;
  } else if (l.gradient_group() > 1) {
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
  const parallel::HeldBytes state = zero_held_by_role(w, l, l.pp - 1);
  const double optimizer_parameters = state.optimizer / 8;  // AdamW's two moments: 8 bytes a parameter it steps
  t.optimizer = optimizer_parameters * machine.optimizer_seconds_per_parameter;
  // More ranks than cores take turns: the step lasts at least all ranks' work over the cores.
  // A rank idle in the bubble lends its core to another, so the turns absorb the bubble first;
  // communication hidden behind compute still copies on a core of the CPU, so it counts.
  if (machine.ranks_share_devices && l.ranks() > machine.devices_per_node) {
    const double busy = t.total() - t.bubble + t.dp_overlapped + t.cp_overlapped;
    t.time_sharing =
        std::max(0.0, busy * static_cast<double>(l.ranks()) / machine.devices_per_node - t.total());
  }
  return t;
}

}  // namespace planning
