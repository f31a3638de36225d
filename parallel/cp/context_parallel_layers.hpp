// Context parallelism as the sequence's layout of nn::GPT (nn/gpt_layers.hpp): the same one
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
//   picked          the ids and targets of this rank's positions (the embedding's, the loss's)
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

class ContextParallelSequence final : public nn::SequenceLayout {
 public:
  // `inner`: the sequence's layout inside each cp rank's positions (whole, or sequence-parallel
  // over tp). `skip_ring_at_step` (testing, train_3d --skip-ring-at-step; -1: never): at that
  // step this rank attends to its own positions alone, as a rank that skips the ring would; its
  // peers wait for it, and the watchdog names it.
  ContextParallelSequence(std::shared_ptr<nn::SequenceLayout> inner, comm::Communicator& cp, CpAttention algorithm,
                          bool overlap = true, int64_t skip_ring_at_step = -1);

  int64_t stream_length(int64_t T, bool training) const override;
  int64_t stream_shards(bool training) const override { return inner_->stream_shards(training); }
  StreamPlace stream_place(int64_t S, bool training) const override;
  int64_t sequence_length(int64_t rows, bool training) const override;
  std::vector<int32_t> picked(std::span<const int32_t> whole, int64_t B, int64_t T, bool training) const override;
  int64_t picked_length(int64_t T, bool training) const override;
  nn::Tensor attention(const nn::Tensor& qkv, int heads, const nn::DropoutMask& dropout, nn::AttentionKernel kernel,
                       nn::Precision precision, bool training) override;
  // A mixture's capacity over the whole sequence: every cp rank's choices per expert for its two
  // chunks gathered (k expert ids a token, counted: [G,2,E] a rank), and each of this rank's
  // chunks starts from the choices of the chunks before it, wherever they are.
  void count_choices(std::span<const int64_t> mine, int64_t G, int runs, int E, std::span<int64_t> before,
                     std::span<int64_t> whole, bool training) override;

  // The trainer's step, for the testing fault above.
  void begin_step(int64_t step) { skip_ring_ = step == skip_ring_at_step_; }

 private:
  std::shared_ptr<nn::SequenceLayout> inner_;
  comm::Communicator& cp_;
  CpAttention algorithm_;
  bool overlap_;
  int64_t skip_ring_at_step_;
  bool skip_ring_ = false;
};

// `inner` under context parallelism over `cp`, or null when cp has one rank.
// `overlap`: ring attention posts the next block's transfer before computing the current one.
std::shared_ptr<ContextParallelSequence> with_context_parallel(std::shared_ptr<nn::SequenceLayout> inner,
                                                               comm::Communicator& cp, CpAttention algorithm,
                                                               bool overlap = true, int64_t skip_ring_at_step = -1);

}  // namespace parallel
