#include "parallel/cp/ulysses_attention.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "comm/error.hpp"
#include "nn/autograd.hpp"
#include "nn/timeline.hpp"

namespace parallel {
namespace {

// The sizes of one trade: B sequences, S = T/c positions here, G groups of C columns, C/c of
// each group per rank. A block of the all-to-all is [B, S, G, C/c]: the rows of one rank's
// positions, the columns of one rank's heads.
struct Trade {
  int64_t B, S, G, C, share;
  std::size_t block() const { return static_cast<std::size_t>(B * S * G * share); }
};

// positions → heads: x [B,S,G·C] → out [B,T,G·C/c]
void to_heads(const float* x, float* out, const Trade& t, const ContextShard& shard, comm::Communicator& cp) {
  const int c = cp.size();
  std::vector<float> send(t.block() * static_cast<std::size_t>(c)), recv(send.size());
  for (int j = 0; j < c; ++j)  // block j: every local row, rank j's columns of each group
    for (int64_t b = 0; b < t.B; ++b)
      for (int64_t s = 0; s < t.S; ++s)
        for (int64_t g = 0; g < t.G; ++g)
          std::copy_n(x + (b * t.S + s) * t.G * t.C + g * t.C + j * t.share, t.share,
                      send.data() + j * t.block() + ((b * t.S + s) * t.G + g) * t.share);
  {
    nn::timeline::Span span("all-to-all: positions → heads", "exchange");
    cp.alltoall(std::span<const float>(send), std::span<float>(recv));
  }
  for (int i = 0; i < c; ++i) {  // block i: rank i's positions, this rank's columns
    const ContextShard theirs = shard.of_rank(i);
    for (int64_t b = 0; b < t.B; ++b)
      for (int64_t s = 0; s < t.S; ++s)
        std::copy_n(recv.data() + i * t.block() + (b * t.S + s) * t.G * t.share, t.G * t.share,
                    out + (b * shard.T + theirs.position(s)) * t.G * t.share);
  }
}

// heads → positions: y [B,T,G·C/c] → out [B,S,G·C]
void to_positions(const float* y, float* out, const Trade& t, const ContextShard& shard, comm::Communicator& cp) {
  const int c = cp.size();
  std::vector<float> send(t.block() * static_cast<std::size_t>(c)), recv(send.size());
  for (int i = 0; i < c; ++i) {  // block i: rank i's positions, this rank's columns
    const ContextShard theirs = shard.of_rank(i);
    for (int64_t b = 0; b < t.B; ++b)
      for (int64_t s = 0; s < t.S; ++s)
        std::copy_n(y + (b * shard.T + theirs.position(s)) * t.G * t.share, t.G * t.share,
                    send.data() + i * t.block() + (b * t.S + s) * t.G * t.share);
  }
  {
    nn::timeline::Span span("all-to-all: heads → positions", "exchange");
    cp.alltoall(std::span<const float>(send), std::span<float>(recv));
  }
  for (int j = 0; j < c; ++j)  // block j: this rank's positions, rank j's columns of each group
    for (int64_t b = 0; b < t.B; ++b)
      for (int64_t s = 0; s < t.S; ++s)
        for (int64_t g = 0; g < t.G; ++g)
          std::copy_n(recv.data() + j * t.block() + ((b * t.S + s) * t.G + g) * t.share, t.share,
                      out + (b * t.S + s) * t.G * t.C + g * t.C + j * t.share);
}

void add_into(const nn::Tensor& x, std::span<const float> values) {
  auto [dx, accumulate] = x.grad_target();
  for (std::size_t i = 0; i < values.size(); ++i) dx[i] = (accumulate ? dx[i] : 0.0f) + values[i];
}

}  // namespace

nn::Tensor sequence_to_heads(const nn::Tensor& x, int groups, const ContextShard& shard, comm::Communicator& cp) {
  const int64_t B = x.size(0), S = x.size(1), C = x.size(2) / groups;
  if (x.size(2) % (int64_t{groups} * cp.size()) != 0 || S != shard.length())
    comm::fail("Ulysses: [{}, {}, {}] is not {} positions of {} groups of columns split over cp {}", B, S, x.size(2),
               shard.length(), groups, cp.size());
  const Trade trade{B, S, groups, C, C / cp.size()};
  const bool track = nn::autograd::needs_grad({&x});
  nn::Tensor out = nn::Tensor::empty({B, shard.T, groups * trade.share}, track);
  to_heads(x.data(), out.data(), trade, shard, cp);
  if (track)
    nn::autograd::record([x, out, trade, shard, &cp]() {
      std::vector<float> dx(static_cast<std::size_t>(x.numel()));
      to_positions(out.grad(), dx.data(), trade, shard, cp);
      add_into(x, dx);
    });
  return out;
}

nn::Tensor heads_to_sequence(const nn::Tensor& y, int groups, const ContextShard& shard, comm::Communicator& cp) {
  const int64_t B = y.size(0), share = y.size(2) / groups;
  if (y.size(1) != shard.T || y.size(2) % groups != 0)
    comm::fail("Ulysses: [{}, {}, {}] is not the {} positions of {} groups", B, y.size(1), y.size(2), shard.T, groups);
  const Trade trade{B, shard.length(), groups, share * cp.size(), share};
  const bool track = nn::autograd::needs_grad({&y});
  nn::Tensor out = nn::Tensor::empty({B, trade.S, groups * trade.C}, track);
  to_positions(y.data(), out.data(), trade, shard, cp);
  if (track)
    nn::autograd::record([y, out, trade, shard, &cp]() {
      std::vector<float> dy(static_cast<std::size_t>(y.numel()));
      to_heads(out.grad(), dy.data(), trade, shard, cp);
      add_into(y, dy);
    });
  return out;
}

nn::Tensor ulysses_attention(const nn::Tensor& qkv, int n_head, const nn::DropoutMask& dropout,
                             nn::AttentionKernel kernel, nn::Precision precision, const ContextShard& shard,
                             comm::Communicator& cp) {
  if (n_head % cp.size() != 0)
    comm::fail("--cp-attention ulysses: the {} attention heads do not split over cp {} (use ring, or a cp dividing "
               "the heads)",
               n_head, cp.size());
  const int heads = n_head / cp.size();  // this rank's, after the trade
  const nn::Tensor mine = sequence_to_heads(qkv, 3, shard, cp);  // [B,T,3C/c]
  // This rank's heads start heads·rank heads into the caller's: their weights' mask is there.
  const nn::DropoutMask mask = dropout.shifted(0, int64_t{heads} * cp.rank() * shard.T * shard.T);
  nn::Tensor y;  // [B,T,C/c]
  {
    nn::timeline::Span span(
        nn::timeline::recording() ? fmt::format("attention: {} of {} heads, every position", heads, n_head) : "",
        "attention");
    y = nn::attention(mine, heads, mask, kernel, precision);
  }
  return heads_to_sequence(y, 1, shard, cp);  // [B,S,C]
}

}  // namespace parallel
