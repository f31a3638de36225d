#include "planning/memory_model.hpp"

#include <algorithm>
#include <cmath>

#include "nn/memory_estimate.hpp"
#include "parallel/dp/zero_optimizer.hpp"
#include "planning/megatron_activations.hpp"

namespace planning {

int64_t micro_batches_in_flight(const Workload& w, const Layout& l, int stage) {
  const int64_t m = l.micro_batches(w), p = l.pp, v = l.virtual_stages;
  if (p == 1) return 1;
  switch (l.schedule) {
    case Schedule::gpipe: return m * v;
    case Schedule::one_f_one_b: return std::min(m, p - stage);
    case Schedule::interleaved: return std::min(m * v, 2 * (p - stage - 1) + (v - 1) * p + 1);
  }
  return 1;
}

namespace {

// nanodist: what forward keeps per micro-batch on the stage, and the step's cast weights.
nn::ContextShape context_of(const Layout& l) {
  return {.ranks = l.cp, .ring_attention = l.cp_attention == CpAttention::ring};
}

double nanodist_activations(const Workload& w, const Layout& l, int stage, int64_t in_flight) {
  const auto& c = w.model;
  const double tokens = static_cast<double>(l.micro_batch) * l.positions(w);  // the rank's, of a micro-batch
  const int blocks = c.n_layer / l.pp, chunks = l.virtual_stages;
  const double per_block = nn::block_activation_floats_per_token(c, c.block_size, l.recompute, w.precision, l.tp,
                                                                  l.sequence_parallel, context_of(l));
  // A chunk micro-batch keeps its chunk's blocks; the embedding and the head come with the
  // first and the last chunk, in flight as often as whole micro-batches are.
  const double micro_batches = std::ceil(static_cast<double>(in_flight) / chunks);
  double floats = static_cast<double>(in_flight) * tokens * per_block * blocks / chunks;
  // A mixture block keeps more than a dense one (the router, k experts' rows; none under full recompute).
  if (c.n_experts > 0 && l.recompute != nn::Recompute::full)
    floats += static_cast<double>(in_flight) * tokens * nn::moe_block_extra_floats_per_token(c, w.precision, l.expert_ranks()) *
              moe_blocks_on_stage(c, l.pp, stage, l.virtual_stages) / chunks;
  const int s = l.sequence_parallel ? l.tp : 1;
  if (stage == 0) floats += micro_batches * tokens * nn::embedding_activation_floats_per_token(c, l.micro_batch, s);
  if (stage == l.pp - 1) floats += micro_batches * tokens * nn::head_activation_floats_per_token(c, w.precision, l.tp, s);
  return 4 * floats + nn::weight_cast_bytes(c, w.precision, blocks, l.tp, stage == l.pp - 1,
                                            moe_blocks_on_stage(c, l.pp, stage, l.virtual_stages), l.ep);
}

// nanodist: backward's working set and the strategy's buffers at the step's peak (fitted to
// what the allocator reports, docs/planning.md).
double nanodist_buffers(const Workload& w, const Layout& l, int stage, double rank_parameters,
                        bool gradients_after_peak) {
  const auto& c = w.model;
  const double tokens = static_cast<double>(l.micro_batch) * l.positions(w), C = c.n_embd;
  // Backward's working set: the last block's gradients in flight at once — its MLP hidden
  // [B,T,4C/t] and its attention's q|k|v and output, ≈ 2C/t more. The attention kernels work
  // one (sample, head) at a time in per-thread scratch outside the tensors' allocator (the
  // fused one a [T,T] dP, the ring's [T/(2c), T/(2c)] pairs): no n_head·T² term. Under context
  // parallelism it is per position of the rank's T/c.
  // (Expert parallelism with its gradients made after the peak: the peak ends forward, and
  // backward's gradients in flight take the place of the activations it frees — measured.)
  const double working_set = 4 * tokens * 6 * C / l.tp;
  double bytes = gradients_after_peak && l.ep > 1 ? 0.0 : working_set;
  // Full recompute: one block's replay (what it keeps without recompute), and the replay's own
  // backward working set.
  if (l.recompute == nn::Recompute::full)
    bytes += working_set + 4 * tokens *
                               nn::block_activation_floats_per_token(c, c.block_size, nn::Recompute::none, w.precision,
                                                                     l.tp, l.sequence_parallel, context_of(l));
  const bool accumulates = l.micro_batches(w) > 1 && l.pp == 1 && l.ep == 1;
  // Replicated gradients averaged over dp: train_dp's accumulation keeps the micro-steps' sum
  // beside the bucket being filled; a pipeline's replicas average a flat copy. (Expert
  // parallelism's flat copies are counted apart, below.)
  if (l.zero == 0 && ((accumulates && l.tp == 1) || (l.gradient_group() > 1 && l.pp > 1 && l.ep == 1)))
    bytes += 4 * rank_parameters;
  // Expert parallelism's averager (parallel/dp/replicas_by_role.hpp) buckets each role's
  // gradients apart, overlapped with backward: a flat copy of every parameter whose group has
  // another rank — the experts only when another ep group holds them too (dp > ep).
  if (l.ep > 1 && l.zero == 0 && l.dp > 1) {
    const double experts_here = expert_parameters_on_stage(c, l.pp, stage, l.virtual_stages, l.ep * l.tp);
    bytes += 4 * (rank_parameters - (l.expert_replicas() == 1 ? experts_here : 0.0));
  }
  // ZeRO-3: the whole parameters of the groups in use (gathered, prefetched) or their gradients.
  if (l.zero == 3 && l.dp > 1) bytes += 4 * rank_parameters;
  // A pipeline's received activation and gradient, [B,T,C] each.
  if (l.pp > 1) bytes += 2 * 4 * tokens * C;
  return bytes;
}

}  // namespace

parallel::HeldBytes zero_held_by_role(const Workload& w, const Layout& l, int stage) {
  const double P = rank_parameter_count(w.model, l.tp, l.pp, stage, l.virtual_stages, l.ep);
  if (l.zero == 0 || l.zero == 3) return parallel::zero_formula_held(l.zero, P, l.dp);  // stage 3: pure dp only
  const double experts = expert_parameters_on_stage(w.model, l.pp, stage, l.virtual_stages, l.ep * l.tp);
  const auto dense_ranks = static_cast<int>(l.gradient_group());
  parallel::HeldBytes held = parallel::zero_formula_held(l.zero, P - experts, dense_ranks);
  held += parallel::zero_formula_held(l.zero, experts, l.ep > 1 ? static_cast<int>(l.expert_replicas()) : dense_ranks);
  return held;
}

RankMemory stage_memory(const Workload& w, const Layout& l, int stage) {
  const double P = rank_parameter_count(w.model, l.tp, l.pp, stage, l.virtual_stages, l.ep);
  const int64_t in_flight = micro_batches_in_flight(w, l, stage);
  RankMemory m{.stage = stage};
  if (w.implementation == Implementation::nanodist) {
    const parallel::HeldBytes held = zero_held_by_role(w, l, stage);
    m.parameters = held.parameters;
    // The gradients are made in backward (the averaging's buckets hold them from the start).
    // Where the peak comes before backward has made any — GPipe's, after every forward; one
    // micro-batch under tensor parallelism with nothing to average, at the end of its
    // forward — they are not in it.
    // Under expert parallelism the gradient tensors are made by the first backward as it frees
    // activations (the averager's flat copies are counted with the buffers), so they are in the
    // peak only when a forward follows it with as many micro-batches in flight (measured).
    // (ZeRO-1 without a pipeline: its full gradients live from backward to the update, made as
    // backward frees the activations; ZeRO-2 and 3 hold their shards throughout.)
    const bool made_after_the_peak = (l.zero == 1 && l.pp == 1) || (l.pp > 1 && l.schedule == Schedule::gpipe) ||
                                     (l.pp == 1 && l.tp > 1 && l.micro_batches(w) == 1 && l.gradient_group() == 1) ||
                                     (l.ep > 1 && l.micro_batches(w) <= in_flight);
    m.gradients = made_after_the_peak && l.zero < 2 ? 0 : held.gradients;
    m.optimizer = held.optimizer;
    m.activations = nanodist_activations(w, l, stage, in_flight);
    m.buffers = nanodist_buffers(w, l, stage, P, made_after_the_peak);
  } else {
    m.parameters = 2 * P;
    m.gradients = 2 * P;
    m.optimizer = 12 * P;
    m.activations = megatron_stage_activation_bytes(w.model, l.micro_batch, l.tp, l.pp, l.virtual_stages,
                                                    l.sequence_parallel, l.recompute, stage, in_flight,
                                                    std::min<int64_t>(l.micro_batches(w), l.schedule == Schedule::gpipe
                                                                                              ? l.micro_batches(w)
                                                                                              : l.pp - stage));
  }
  return m;
}

RankMemory peak_rank_memory(const Workload& w, const Layout& l) {
  RankMemory peak = stage_memory(w, l, 0);
  for (int s = 1; s < l.pp; ++s) {
    RankMemory m = stage_memory(w, l, s);
    if (m.total() > peak.total()) peak = m;
  }
  return peak;
}

}  // namespace planning
