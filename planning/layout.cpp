#include "planning/layout.hpp"

#include <fmt/format.h>

namespace planning {

namespace {
constexpr int kTrainersVocabulary = 65;  // tiny Shakespeare's characters

// What train_3d refuses with --cp (trainers/train_3d.cpp), and the implementation planned.
std::string context_parallel_impossible(const Layout& l, const Workload& w) {
  const auto& c = w.model;
  const int cp = l.cp, tp = l.tp;
  if (w.implementation == Implementation::megatron)
    return "the megatron implementation is planned without context parallelism (its 2021-22 papers had none)";
  if (c.block_size % (2 * static_cast<int64_t>(cp)) != 0)
    return fmt::format("context parallelism: 2 × cp {} does not divide the sequence of {} (two chunks a rank)", cp,
                       c.block_size);
  if (l.sequence_parallel && tp % 2 != 0)
    return fmt::format("context parallelism with sequence parallelism needs an even tp (got {})", tp);
  if (l.sequence_parallel && c.block_size / cp % tp != 0)
    return fmt::format("sequence parallelism: tp {} does not divide a cp rank's {} positions", tp, c.block_size / cp);
  if (l.cp_attention == CpAttention::ulysses && (c.n_head / tp) % cp != 0)
    return fmt::format("Ulysses: cp {} does not divide the {} heads of a tp rank", cp, c.n_head / tp);
  if (l.cp_attention == CpAttention::ring && w.precision == nn::Precision::bf16)
    return "ring attention computes in fp32 (its own kernel): with bf16 use Ulysses";
  return "";
}

}  // namespace

std::string Layout::describe(const Workload& w) const {
  std::string pipeline = pp > 1 ? fmt::format(" {}", name_of(schedule)) : "";
  if (virtual_stages > 1) pipeline += fmt::format(" v{}", virtual_stages);
  if (cp > 1) pipeline += fmt::format(" · cp {} {}", cp, kCpAttentionNames[static_cast<std::size_t>(cp_attention)]);
  return fmt::format("dp {}{}{} · tp {}{} · pp {}{} · {} · {} × {}", dp, ep > 1 ? fmt::format(" ep {}", ep) : "",
                     zero > 0 ? fmt::format(" zero{}", zero) : "",
                     tp, sequence_parallel ? " sp" : "", pp, pipeline, nn::name_of(recompute), micro_batch,
                     micro_batches(w));
}

std::string Layout::impossible(const Workload& w) const {
  const auto& c = w.model;
  if (dp < 1 || tp < 1 || pp < 1 || cp < 1 || ep < 1 || virtual_stages < 1 || micro_batch < 1)
    return "every degree must be ≥ 1";
  if (ranks() != w.devices)
    return fmt::format("dp × tp × pp{} = {} is not the {} devices", cp > 1 ? " × cp" : "", ranks(), w.devices);
  if (c.n_head % tp != 0) return fmt::format("tp {} does not divide the {} heads", tp, c.n_head);
  if (virtual_stages > c.n_layer || c.n_layer % (static_cast<int64_t>(pp) * virtual_stages) != 0)
    return fmt::format("pp {} × v {} does not divide the {} blocks", pp, virtual_stages, c.n_layer);
  if (sequence_parallel && c.block_size % tp != 0)
    return fmt::format("sequence parallelism: tp {} does not divide the sequence of {}", tp, c.block_size);
  if (w.global_batch % (static_cast<int64_t>(dp) * micro_batch) != 0)
    return fmt::format("dp {} × micro-batch {} does not divide the global batch {}", dp, micro_batch, w.global_batch);
  if (sequence_parallel && tp == 1) return "sequence parallelism needs tp > 1";
  if (zero < 0 || zero > 3) return "ZeRO's stage is 0 to 3";
  if ((virtual_stages > 1) != (schedule == Schedule::interleaved))
    return "virtual stages > 1 is the interleaved schedule, and only it";
  if (pp == 1 && schedule != Schedule::one_f_one_b) return "a schedule needs pp > 1";
  if (virtual_stages > 1 && micro_batches(w) % pp != 0)
    return fmt::format("interleaved: the {} micro-batches are not a multiple of pp {}", micro_batches(w), pp);
  if (zero > 0 && w.implementation == Implementation::megatron)
    return "the megatron implementation is planned without ZeRO (Megatron-LM 2021 had none)";
  if (zero > 0 && (tp > 1 || pp > 1 || cp > 1)) return "nanodist's ZeRO runs with pure data parallelism (train_dp)";
  if (c.n_experts > 0 && w.implementation == Implementation::megatron)
    return "the megatron implementation is planned dense (its 2021-22 papers had no mixture of experts)";
  if (c.n_experts > 0 && (tp > 1 || cp > 1))
    return "a mixture of experts runs on whole experts and whole sequences: no tp, no cp";
  if (ep > 1) {  // what train_3d refuses with --ep
    if (c.n_experts == 0) return "expert parallelism needs a mixture of experts";
    if (dp % ep != 0) return fmt::format("ep {} does not divide dp {} (expert groups are carved from dp ranks)", ep, dp);
    if (c.n_experts % ep != 0) return fmt::format("ep {} does not divide the {} experts", ep, c.n_experts);
    if (zero > 0) return "nanodist's ZeRO runs in train_dp, expert parallelism in train_3d";
  }
  if (cp > 1) return context_parallel_impossible(*this, w);
  return "";
}

std::string Layout::trainer_command(const Workload& w) const {
  const auto& c = w.model;
  if (c.vocab_size != kTrainersVocabulary) return "";
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
  if (tp == 1 && cp == 1 && ep == 1)
    return fmt::format("mpiexec -n {} train_pp {} --dp {} --batch-size {} {}", ranks(), common, dp, replica_batch,
                       pipeline);
  if (pp == 1 && dp == 1 && cp == 1)
    return fmt::format("mpiexec -n {} train_tp {}{} --batch-size {} --grad-accum {}", ranks(), common,
                       sequence_parallel ? " --sequence-parallel" : "", micro_batch, micro_batches(w));
  const std::string context =
      cp > 1 ? fmt::format(" --cp {} --cp-attention {}", cp, kCpAttentionNames[static_cast<std::size_t>(cp_attention)])
             : "";
  const std::string experts = ep > 1 ? fmt::format(" --ep {}", ep) : "";
  return fmt::format("mpiexec -n {} train_3d {} --dp {}{} --pp {} --tp {}{}{} --batch-size {} {}", ranks(), common, dp,
                     experts, pp, tp, sequence_parallel ? " --sequence-parallel" : "", context, replica_batch, pipeline);
}

}  // namespace planning
