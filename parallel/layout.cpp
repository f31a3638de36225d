#include "parallel/layout.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "comm/error.hpp"
#include "parallel/pp/stage.hpp"

namespace parallel {

std::string Layout::why_not(int world_size) const {
  if (dp < 1 || pp < 1 || cp < 1 || tp < 1 || ep < 1 || virtual_stages < 1)
    return fmt::format("every degree must be 1 or more (--dp {} --pp {} --cp {} --tp {} --ep {} --virtual-stages {})",
                       dp, pp, cp, tp, ep, virtual_stages);
  if (ranks() != world_size) {
    if (cp == 1)
      return fmt::format("{} ranks cannot be --dp {} × --pp {} × --tp {} = {:.0f}: run D·P·T ranks", world_size, dp, pp,
                         tp, ranks());
    return fmt::format("{} ranks cannot be --dp {} × --pp {} × --cp {} × --tp {} = {:.0f}: run D·P·C·T ranks",
                       world_size, dp, pp, cp, tp, ranks());
  }
  if (dp % ep != 0)
    return fmt::format("--ep {} does not divide --dp {}: expert-parallel groups are carved from the data-parallel ranks",
                       ep, dp);
  if (zero < 0 || zero > 3) return fmt::format("--zero {}: ZeRO's stage is 0 to 3", zero);
  // (torchtitan composes FSDP2 with tp and cp, but not gathers that follow a pipeline's schedule.)
  if (zero == 3 && (pp > 1 || cp > 1 || tp > 1 || ep > 1))
    return "--zero 3 runs with pure data parallelism (train_dp): on the grid each block's gathers would have to follow "
           "the pipeline's schedule and the tensor-parallel cuts; --zero 1 or 2 shard the optimizer (and gradients) "
           "on any layout";
  return "";
}

namespace {

// Context parallelism's splits of the sequence and the heads.
std::string context_parallel_why_not(const Layout& l, const LayoutJob& job) {
  const nn::GPTConfig& c = job.model;
  if (c.block_size % (2 * static_cast<int64_t>(l.cp)) != 0)
    return fmt::format("--cp {}: --block-size {} does not split into 2·cp = {} equal chunks (each cp rank holds two, "
                       "one from each end)",
                       l.cp, c.block_size, 2 * l.cp);
  if (l.cp_attention == CpAttention::ulysses && c.n_head / l.tp % l.cp != 0)
    return fmt::format("--cp-attention ulysses: the {} heads of each tp rank do not split over --cp {} "
                       "(--cp-attention ring, or a cp dividing them)",
                       c.n_head / l.tp, l.cp);
  // Sequence parallelism cuts each cp rank's T/cp positions again over tp: each piece must lie
  // within one of its two chunks (one run of positions), which an even tp gives.
  if (l.sequence_parallel && l.tp % 2 != 0)
    return fmt::format("--cp with --sequence-parallel needs an even --tp (got {}): each tp rank's share of a cp "
                       "rank's positions must lie within one of its two chunks",
                       l.tp);
  if (l.sequence_parallel && c.block_size / l.cp % l.tp != 0)
    return fmt::format("--cp {} with --sequence-parallel: the {} positions of a cp rank do not split over --tp {}",
                       l.cp, c.block_size / l.cp, l.tp);
  // Ring attention has its own kernel (fp32 or bf16 products): the naive one's steps would no
  // longer match one process. (Only while training: evaluation and sampling run whole sequences
  // on every cp rank.)
  if (job.replica_batch == 0) return "";
  if (l.cp_attention == CpAttention::ring && job.attention == nn::AttentionKernel::naive)
    return "--cp-attention ring has its own kernel: with --attention naive use --cp-attention ulysses";
  return "";
}

}  // namespace

std::string Layout::why_not(const LayoutJob& job) const {
  if (std::string why = why_not(job.world_size); !why.empty()) return why;
  const nn::GPTConfig& c = job.model;
  if (c.n_head % tp != 0)
    return fmt::format("--n-head {} is not divisible by --tp {}: each tensor-parallel rank runs n_head / tp whole heads",
                       c.n_head, tp);
  if (sequence_parallel && tp == 1)
    return "--sequence-parallel needs --tp 2 or more: it shards along the sequence over the tp group";
  if (sequence_parallel && c.block_size % tp != 0)
    return fmt::format("--sequence-parallel: --block-size {} is not divisible by --tp {}", c.block_size, tp);
  if (cp > 1)
    if (std::string why = context_parallel_why_not(*this, job); !why.empty()) return why;
  // A mixture counts capacity over whole sequences, position by position: under cp each rank
  // learns the choices of the positions before its chunks (ContextParallelSequence::
  // count_choices); sequence parallelism's T/tp positions a tp rank are refused. Beside tp its
  // experts are folded, not cut: the tp ranks join the experts' group (parallel/grid.hpp).
  if (c.n_experts > 0 && sequence_parallel)
    return fmt::format("--n-experts {} with --sequence-parallel: a mixture of experts routes whole sequences, and "
                       "sequence parallelism holds T/tp positions of each on a tp rank (run --tp without it)",
                       c.n_experts);
  if (ep > 1 && c.n_experts == 0)
    return fmt::format("--ep {} needs a mixture of experts (--n-experts): it splits the experts over data-parallel "
                       "ranks",
                       ep);
  if (c.n_experts > 0 && c.n_experts % (ep * tp) != 0) {
    if (tp == 1)
      return fmt::format("--n-experts {} is not divisible by --ep {}: each expert-parallel rank holds n_experts / ep "
                         "of them",
                         c.n_experts, ep);
    return fmt::format("--n-experts {} is not divisible by --ep {} × --tp {} = {}: the tp ranks are folded into the "
                       "experts' group, each rank holds n_experts / (ep·tp) of them",
                       c.n_experts, ep, tp, ep * tp);
  }
  try {
    chunk_layers(c.n_layer);
  } catch (const comm::UsageError& e) {
    return e.what();
  }
  if (job.replica_batch == 0) return "";  // no training batch (evaluation, sampling): nothing to cut
  if (micro_batches < 1) return fmt::format("--micro-batches {} must be 1 or more", micro_batches);
  if (job.replica_batch % micro_batches != 0)
    return fmt::format("--micro-batches {} does not divide --batch-size {}", micro_batches, job.replica_batch);
  if (virtual_stages > 1 && micro_batches % pp != 0)
    return fmt::format("--virtual-stages {}: --micro-batches {} is not a multiple of the {} pipeline stages "
                       "(interleaved 1F1B runs micro-batches in groups of p)",
                       virtual_stages, micro_batches, pp);
  return "";
}

void Layout::check(const LayoutJob& job) const {
  if (std::string why = why_not(job); !why.empty()) throw comm::UsageError(why);
}

void Layout::check(int world_size) const {
  if (std::string why = why_not(world_size); !why.empty()) throw comm::UsageError(why);
}

std::vector<int> Layout::chunk_layers(int n_layer) const {
  const int V = virtual_stages;
  const int64_t chunks = static_cast<int64_t>(pp) * V;
  if (V == 1) return parallel::stage_layers(n_layer, pp, stage_layers);
  if (pp < 2)
    throw comm::UsageError(fmt::format(
        "--virtual-stages {} needs 2 or more pipeline stages: the chunks of one stage go round a ring of stages", V));
  if (chunks > n_layer)
    throw comm::UsageError(fmt::format("--virtual-stages {} × {} stages = {} chunks for {} blocks: every chunk needs at "
                                       "least one block (a smaller --virtual-stages, or more --n-layer)",
                                       V, pp, chunks, n_layer));
  if (!stage_layers.empty() && static_cast<int>(stage_layers.size()) != chunks)
    throw comm::UsageError(fmt::format("--stage-layers lists {} numbers, but {} stages × --virtual-stages {} make {} "
                                       "chunks: give each chunk's blocks, in model order",
                                       stage_layers.size(), pp, V, chunks));
  return parallel::stage_layers(n_layer, static_cast<int>(chunks), stage_layers);
}

int Layout::default_micro_batches(int pp, int virtual_stages, int64_t replica_batch) {
  if (pp <= 1) return 1;
  const auto fits = [&](int64_t m) { return replica_batch % m == 0 && (virtual_stages == 1 || m % pp == 0); };
  if (replica_batch <= 0 || fits(4)) return 4;
  for (int64_t m = std::max(4, pp); m > 1; --m)  // the most that fit, up to 4 (or pp, interleaved)
    if (fits(m)) return static_cast<int>(m);
  return 4;  // nothing fits: the check names the rule
}

Layout::Moved Layout::on(int ranks, int64_t replica_batch) const {
  Moved moved{*this, replica_batch, ""};
  if (ranks == this->ranks()) return moved;
  const int64_t replica = static_cast<int64_t>(pp) * cp * tp;
  if (ranks < replica || ranks % replica != 0) {
    moved.why = fmt::format("{} ranks is not a multiple of the {} ranks of one replica (pp {} × cp {} × tp {})", ranks,
                            replica, pp, cp, tp);
    return moved;
  }
  const int new_dp = static_cast<int>(ranks / replica);
  // The global batch dp·B in dp·M micro-batches, shared by the new replicas.
  const int64_t global = static_cast<int64_t>(dp) * replica_batch, micro = static_cast<int64_t>(dp) * micro_batches;
  if (global % new_dp != 0 || micro % new_dp != 0) {
    moved.why = fmt::format("a batch of {} in {} micro-batches does not split over {} replicas", global, micro, new_dp);
    return moved;
  }
  moved.layout.dp = new_dp;
  // Fewer replicas than ep: the largest ep left (a divisor of ep, so it still divides the
  // experts). Otherwise ep stays (each rank keeps E/ep experts: no more memory), and a dp it does
  // not divide is refused by why_not: the launcher then tries fewer ranks.
  if (new_dp < ep) moved.layout.ep = std::gcd(ep, new_dp);
  moved.layout.micro_batches = static_cast<int>(micro / new_dp);
  moved.replica_batch = global / new_dp;
  return moved;
}

}  // namespace parallel
