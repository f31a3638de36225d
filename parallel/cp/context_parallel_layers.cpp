#include "parallel/cp/context_parallel_layers.hpp"

#include "comm/error.hpp"
#include "parallel/cp/ring_attention.hpp"
#include "parallel/cp/ulysses_attention.hpp"

namespace parallel {

ContextParallelSequence::ContextParallelSequence(std::shared_ptr<nn::SequenceLayout> inner, comm::Communicator& cp,
                                                 CpAttention algorithm, bool overlap, int64_t skip_ring_at_step)
    : inner_(std::move(inner)), cp_(cp), algorithm_(algorithm), overlap_(overlap), skip_ring_at_step_(skip_ring_at_step) {}

int64_t ContextParallelSequence::stream_length(int64_t T, bool training) const {
  // The cp shard's T/c positions, cut again over tp under sequence parallelism.
  return inner_->stream_length(training ? ContextShard::of(T, cp_.size(), cp_.rank()).length() : T, training);
}

nn::SequenceLayout::StreamPlace ContextParallelSequence::stream_place(int64_t S, bool training) const {
  if (!training) return inner_->stream_place(S, training);
  const int64_t shard_length = S * inner_->stream_shards(training);  // the cp shard's positions
  const ContextShard shard{shard_length * cp_.size(), cp_.size(), cp_.rank()};
  if (S == shard_length) return {shard.position(0), shard.position(S / 2)};  // chunks r and 2c−1−r
  // Sequence parallelism: this tp rank's piece of the shard, S positions from `local`.
  const int64_t local = inner_->stream_place(S, training).first, half = shard_length / 2;
  if (local < half && local + S > half)
    comm::fail("context parallelism with sequence parallelism: positions {}…{} of the shard straddle its two chunks "
               "(the tp degree must be even)", local, local + S - 1);
  return {shard.position(local), -1};
}

void ContextParallelSequence::count_choices(std::span<const int64_t> mine, int64_t G, int runs, int E,
                                            std::span<int64_t> before, std::span<int64_t> whole, bool training) {
  if (!training) return inner_->count_choices(mine, G, runs, E, before, whole, training);  // whole sequences here
  if (runs != 2) comm::fail("context parallelism: a mixture's routing got {} runs of positions, not 2", runs);
  const int c = cp_.size(), me = cp_.rank();
  std::vector<int64_t> all(mine.size() * static_cast<std::size_t>(c));  // [c][G,2,E]
  cp_.allgather(mine, std::span(all));
  // Chunk q of 2c: rank q's first (q < c) or rank 2c−1−q's second; the counts before each chunk.
  const auto chunk_count = [&](int64_t g, int q, int e) {
    const int rank = q < c ? q : 2 * c - 1 - q, run = q < c ? 0 : 1;
    return all[static_cast<std::size_t>(((rank * G + g) * 2 + run) * E + e)];
  };
  for (int64_t g = 0; g < G; ++g)
    for (int e = 0; e < E; ++e) {
      int64_t sum = 0;
      for (int q = 0; q < 2 * c; ++q) {
        if (q == me) before[static_cast<std::size_t>((g * 2 + 0) * E + e)] = sum;
        if (q == 2 * c - 1 - me) before[static_cast<std::size_t>((g * 2 + 1) * E + e)] = sum;
        sum += chunk_count(g, q, e);
      }
      whole[static_cast<std::size_t>(g * E + e)] = sum;
    }
}

int64_t ContextParallelSequence::sequence_length(int64_t rows, bool training) const {
  return training ? rows * cp_.size() : rows;
}

std::vector<int32_t> ContextParallelSequence::picked(std::span<const int32_t> whole, int64_t B, int64_t T,
                                                     bool training) const {
  if (!training) return {whole.begin(), whole.end()};
  const ContextShard shard = ContextShard::of(T, cp_.size(), cp_.rank());
  std::vector<int32_t> rows;
  rows.reserve(static_cast<std::size_t>(B * shard.length()));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < shard.length(); ++s) rows.push_back(whole[static_cast<std::size_t>(b * T + shard.position(s))]);
  return rows;
}

int64_t ContextParallelSequence::picked_length(int64_t T, bool training) const {
  return training ? T / cp_.size() : T;
}

nn::Tensor ContextParallelSequence::attention(const nn::Tensor& qkv, int heads, const nn::DropoutMask& dropout,
                                              nn::AttentionKernel kernel, nn::Precision precision, bool training) {
  if (!training || skip_ring_) return inner_->attention(qkv, heads, dropout, kernel, precision, training);
  const ContextShard shard = ContextShard::of(qkv.size(1) * cp_.size(), cp_.size(), cp_.rank());
  if (algorithm_ == CpAttention::ulysses)
    return ulysses_attention(qkv, heads, dropout, kernel, precision, shard, cp_);
  return ring_attention(qkv, heads, dropout, shard, cp_, overlap_, precision);
}

std::shared_ptr<ContextParallelSequence> with_context_parallel(std::shared_ptr<nn::SequenceLayout> inner,
                                                               comm::Communicator& cp, CpAttention algorithm,
                                                               bool overlap, int64_t skip_ring_at_step) {
  if (cp.size() == 1) return nullptr;
  return std::make_shared<ContextParallelSequence>(std::move(inner), cp, algorithm, overlap, skip_ring_at_step);
}

}  // namespace parallel
