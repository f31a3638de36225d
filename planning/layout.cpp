#include "planning/layout.hpp"

#include <fmt/format.h>

namespace planning {

namespace {
constexpr int kTrainersVocabulary = 65;  // tiny Shakespeare's characters
}  // namespace

std::string Layout::describe(const Workload& w) const {
  std::string pipeline = pp > 1 ? fmt::format(" {}", name_of(schedule)) : "";
  if (virtual_stages > 1) pipeline += fmt::format(" v{}", virtual_stages);
  if (cp > 1) pipeline += fmt::format(" · cp {} {}", cp, kCpAttentionNames[static_cast<std::size_t>(cp_attention)]);
  return fmt::format("dp {}{}{} · tp {}{} · pp {}{} · {} · {} × {}", dp,
                     ep > 1 || expert_tensor_parallel ? fmt::format(" ep {}{}", ep, expert_tensor_parallel ? " etp" : "")
                                                      : "",
                     zero > 0 ? fmt::format(" zero{}", zero) : "",
                     tp, sequence_parallel ? " sp" : "", pp, pipeline, nn::name_of(recompute), micro_batch,
                     micro_batches(w));
}

parallel::Layout Layout::grid(const Workload& w) const {
  return {.dp = dp,
          .pp = pp,
          .cp = cp,
          .tp = tp,
          .ep = ep,
          .virtual_stages = virtual_stages,
          .stage_layers = {},
          .cp_attention = cp_attention,
          .sequence_parallel = sequence_parallel,
          .micro_batches = static_cast<int>(micro_batches(w)),
          .zero = zero};
}

std::string Layout::impossible(const Workload& w) const {
  const auto& c = w.model;
  if (dp < 1 || micro_batch < 1) return fmt::format("every degree must be 1 or more (dp {}, micro-batch {})", dp, micro_batch);
  if (w.global_batch % (static_cast<int64_t>(dp) * micro_batch) != 0)
    return fmt::format("dp {} × micro-batch {} does not divide the global batch {}", dp, micro_batch, w.global_batch);
  if (w.implementation == Implementation::megatron) {
    if (zero > 0) return "the megatron implementation is planned without ZeRO (Megatron-LM 2021 had none)";
    if (c.n_experts > 0)
      return "the megatron implementation is planned dense (its 2021-22 papers had no mixture of experts)";
    if (cp > 1)
      return "the megatron implementation is planned without context parallelism (its 2021-22 papers had none)";
  }
  if (expert_tensor_parallel && (tp == 1 || c.n_experts == 0 || sequence_parallel))
    return "--expert-tensor-parallel cuts a mixture's experts over tp: it needs --n-experts, --tp 2 or more, and no "
           "sequence parallelism";
  // The trainers' rules, in their words. (With the experts cut rather than folded, E need only
  // split over ep: the rule E % (ep·tp) is asked of E·tp.)
  nn::GPTConfig rules = c;
  if (expert_tensor_parallel) rules.n_experts *= tp;
  const std::string why = grid(w).why_not({.model = rules,
                                           .world_size = w.devices,
                                           .replica_batch = w.global_batch / dp,
                                           .precision = w.precision,
                                           .attention = nn::AttentionKernel::fused});
  if (!why.empty()) return why;
  // The planner's own: its formulas count n_layer / (pp·v) blocks a chunk.
  if (c.n_layer % (static_cast<int64_t>(pp) * virtual_stages) != 0)
    return fmt::format("pp {} × v {} does not divide the {} blocks", pp, virtual_stages, c.n_layer);
  if ((virtual_stages > 1) != (schedule == Schedule::interleaved))
    return "virtual stages > 1 is the interleaved schedule, and only it";
  if (pp == 1 && schedule != Schedule::one_f_one_b) return "a schedule needs pp > 1";
  return "";
}

std::string Layout::trainer_command(const Workload& w) const {
  const auto& c = w.model;
  if (c.vocab_size != kTrainersVocabulary || expert_tensor_parallel) return "";
  std::string model = fmt::format("--n-layer {} --n-head {} --n-embd {} --block-size {}{}", c.n_layer, c.n_head,
                                  c.n_embd, c.block_size, c.bias ? " --bias 1" : "");
  if (c.dropout > 0) model += fmt::format(" --dropout {}", c.dropout);
  if (c.n_experts > 0)
    model += fmt::format(" --n-experts {} --experts-per-token {} --capacity-factor {} --moe-every {}", c.n_experts,
                         c.experts_per_token, c.capacity_factor, c.moe_every);
  const std::string common =
      fmt::format("{} --precision {} --recompute {}", model, nn::kPrecisionNames[static_cast<std::size_t>(w.precision)],
                  nn::name_of(recompute));
  if (tp == 1 && pp == 1 && cp == 1 && ep == 1)
    return fmt::format("mpiexec -n {} train_dp {} --zero {} --batch-size {} --grad-accum {}", ranks(), common, zero,
                       micro_batch, micro_batches(w));
  const int64_t replica_batch = w.global_batch / dp;
  const std::string pipeline = fmt::format("--schedule {} --virtual-stages {} --micro-batches {}",
                                           schedule == Schedule::gpipe ? "gpipe" : "1f1b", virtual_stages,
                                           micro_batches(w));
  if (tp == 1 && cp == 1 && ep == 1 && zero == 0)
    return fmt::format("mpiexec -n {} train_pp {} --dp {} --batch-size {} {}", ranks(), common, dp, replica_batch,
                       pipeline);
  if (pp == 1 && dp == 1 && cp == 1 && zero == 0)
    return fmt::format("mpiexec -n {} train_tp {}{} --batch-size {} --grad-accum {}", ranks(), common,
                       sequence_parallel ? " --sequence-parallel" : "", micro_batch, micro_batches(w));
  const std::string context =
      cp > 1 ? fmt::format(" --cp {} --cp-attention {}", cp, kCpAttentionNames[static_cast<std::size_t>(cp_attention)])
             : "";
  const std::string experts = ep > 1 ? fmt::format(" --ep {}", ep) : "";
  const std::string sharded = zero > 0 ? fmt::format(" --zero {}", zero) : "";
  return fmt::format("mpiexec -n {} train_3d {} --dp {}{}{} --pp {} --tp {}{}{} --batch-size {} {}", ranks(), common,
                     dp, experts, sharded, pp, tp, sequence_parallel ? " --sequence-parallel" : "", context,
                     replica_batch, pipeline);
}

}  // namespace planning
