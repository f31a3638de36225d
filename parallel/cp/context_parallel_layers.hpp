// Context parallelism as a layers implementation of nn::GPT (nn/gpt_layers.hpp): the same one
// GPT, whose residual stream holds this rank's T/c positions of every sequence (the
// load-balanced shard, context_shard.hpp) while training, and whose attention goes round the
// cp group — ring attention or Ulysses. Everything else in a block is position-wise, so it
// runs unchanged on the rank's positions; the linears are the inner layers' (whole, or
// tensor-parallel, with or without sequence parallelism), the loss is the mean over the rank's
// positions (the gradients averaged over cp, with dp, make the mean over the whole sequence).
//
//   stream          [B, T/c, C]: positions of chunks r and 2c−1−r (their ids, their wpe rows,
//                   their dropout masks at their place in the whole); under sequence
//                   parallelism [B, T/(c·t), C], tp rank j's piece j of those T/c — within one
//                   chunk when t is even (t odd is refused), so one run of positions
//   attention       ring_attention or ulysses_attention over cp, heads as the inner layers hold
//   cross_entropy   the targets of this rank's positions
//
// Evaluation and sampling (not training) run the whole sequence on every rank of the group:
// no attention to split, nothing to gain for short sequences, the same answer everywhere.
#pragma once
#include <memory>

#include "comm/communicator.hpp"
#include "nn/gpt_layers.hpp"
#include "parallel/cp/context_shard.hpp"
#include "parallel/layout.hpp"  // CpAttention

namespace parallel {

class ContextParallelLayers final : public nn::LayersAround {
 public:
  ContextParallelLayers(std::shared_ptr<nn::GPTLayers> inner, comm::Communicator& cp, CpAttention algorithm,
                        bool overlap = true);

  int64_t stream_length(int64_t T, bool training) const override;
  int64_t first_stream_position(int64_t S, bool training) const override;
  StreamPlace stream_place(int64_t S, bool training) const override;
  int64_t sequence_length(int64_t rows, bool training) const override;
  nn::Tensor token_embedding(const nn::Tensor& wte, std::span<const int32_t> ids, int64_t B, int64_t T,
                             bool training) override;
  nn::Tensor attention(const nn::Tensor& qkv, int heads, const nn::DropoutMask& dropout, nn::AttentionKernel kernel,
                       nn::Precision precision, bool training) override;
  nn::Tensor cross_entropy(const nn::Tensor& logits, std::span<const int32_t> targets) override;

  // Testing (train_3d --skip-ring-at-step): this rank attends to its own positions alone, as a
  // rank that skips the ring would; its peers wait for it, and the watchdog names it.
  bool skip_ring = false;

 private:
  // The rows of this rank's positions of every sequence: [B,T] → [B,S].
  std::vector<int32_t> mine(std::span<const int32_t> whole, int64_t B, int64_t T) const;

  comm::Communicator& cp_;
  CpAttention algorithm_;
  bool overlap_;
};

// `inner` under context parallelism over `cp`, or `inner` itself when cp has one rank.
// `overlap`: ring attention posts the next block's transfer before computing the current one.
std::shared_ptr<nn::GPTLayers> with_context_parallel(std::shared_ptr<nn::GPTLayers> inner, comm::Communicator& cp,
                                                     CpAttention algorithm, bool overlap = true);

}  // namespace parallel
