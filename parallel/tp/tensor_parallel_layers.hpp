// The tensor-parallel layers substituted into nn::GPT (nn/gpt_layers.hpp; Megatron-LM): how
// weights are cut (a nn::WeightCut) and, with sequence parallelism, the sequence's layout (a
// nn::SequenceLayout: each tp rank's T/W positions of the stream). Each
// of the W ranks of the `tp` group holds 1/W of every big weight and computes 1/W of every
// big matmul.
//
//   ids ─ vocab-parallel wte ─ g ─┐
//   positions ─ wpe ──────────────┴─ + ─ n_layer × Block ─ ln_f ─ f ─ lm_head (wte rows) ─ vocab-parallel loss
//
//   Block: x = x + g( attention_r( f(ln_1(x)) · c_attn_rᵀ ) · c_proj_rᵀ ) + c_proj.bias
//          x = x + g( gelu( f(ln_2(x)) · c_fc_rᵀ ) · mlp.c_proj_rᵀ ) + mlp.c_proj.bias
//
// Split (each parameter's nn::ParameterRole, declared where nn::GPT makes it):
//          c_attn   column-parallel, q, k and v each cut by whole heads (n_head/W heads here,
//                   so attention itself runs locally); mlp.c_fc column-parallel;
//          c_proj, mlp.c_proj  row-parallel; wte by vocabulary rows (V padded to a multiple
//          of W with rows that are never looked up and never predicted).
// Whole on every rank: wpe, the layernorms, the row-parallel biases (their gradients come out
// the same on every rank: f and g make every replicated activation's gradient whole).
//
// With sequence parallelism, while training, the stream outside the column → row pairs is
// [B,T/W,C] (this rank's positions): f becomes an all-gather of the shards and g a
// reduce-scatter into them (parallel/tp/sequence_parallel_ops.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/gpt.hpp"
#include "nn/gpt_layers.hpp"

namespace parallel {

// The vocabulary padded to a multiple of the tp ranks (wte's rows: ⌈V/tp⌉ per rank).
inline int64_t padded_vocab(int vocab_size, int tp) { return (int64_t{vocab_size} + tp - 1) / tp * tp; }

class TensorParallelLayers final : public nn::WeightCut, public nn::WholeSequence {
 public:
  // Refuses (nn::Error) n_head not divisible by W, and, with sequence parallelism, block_size.
  TensorParallelLayers(const nn::GPTConfig& config, comm::Communicator& tp, bool sequence_parallel);

  nn::Tensor keep(const nn::Tensor& whole, nn::ParameterRole role) override;
  bool is_cut(nn::ParameterRole role) const override {  // (an expert is whole: folded, not cut, parallel/ep/)
    return role != nn::ParameterRole::replicated && role != nn::ParameterRole::expert;
  }
  std::vector<float> shard(nn::ParameterRole role, const nn::Shape& whole_shape,
                           std::span<const float> whole) const override;
  std::vector<float> gather(nn::ParameterRole role, const nn::Shape& mine_shape,
                            std::span<const float> mine) const override;
  nn::Shape whole_shape(nn::ParameterRole role, const nn::Shape& mine_shape) const override;
  double sum_over_group(double mine) const override;
  void sum_replicated_grads(std::span<const nn::Tensor> replicated) override;

  int local_heads(int n_head) const override { return n_head / tp_.size(); }
  int first_head(int n_head) const override { return tp_.rank() * local_heads(n_head); }
  // The sequence under sequence parallelism (while training): this rank's T/W of the stream,
  // the shards in rank order; otherwise the whole sequence.
  int64_t stream_length(int64_t T, bool training) const override;
  StreamPlace stream_place(int64_t S, bool training) const override;
  int64_t stream_shards(bool training) const override { return sharded(training) ? tp_.size() : 1; }
  nn::Tensor token_embedding(const nn::Tensor& wte, std::span<const int32_t> ids, int64_t B, int64_t T,
                             bool training) override;
  nn::Tensor column_linear(const nn::Tensor& x, const nn::Tensor& weight, const nn::Tensor& bias, const char* family,
                           nn::Precision precision, bool training) override;
  nn::Tensor row_linear(const nn::Tensor& x, const nn::Tensor& weight, const nn::Tensor& bias, const char* family,
                        nn::Precision precision, bool training) override;
  nn::Tensor cross_entropy(const nn::Tensor& logits, std::span<const int32_t> targets) override;
  void gather_vocabulary(std::span<const float> mine, std::span<float> whole) override;

  comm::Communicator& group() const { return tp_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  int64_t padded_vocab() const { return parallel::padded_vocab(vocab_size_, tp_.size()); }

 private:
  bool sharded(bool training) const { return sequence_parallel_ && training; }

  comm::Communicator& tp_;
  bool sequence_parallel_;
  int vocab_size_;
  int64_t rows_per_rank_;  // wte rows per rank: ⌈V/W⌉
};

// The layers of a model whose big matmuls are split over `tp` (its weights and, with sequence
// parallelism, its sequence): tensor-parallel ones, or the whole ones (null) when the group is
// one rank (tp = 1 is the whole model, with nothing to send and no sequence to shard).
std::shared_ptr<TensorParallelLayers> make_tensor_parallel(const nn::GPTConfig& config, comm::Communicator& tp,
                                                           bool sequence_parallel = false);
// nn::GPT (the whole model, or a pipeline stage's `part`) with tensor-parallel layers over `tp`
// — kept so even on one rank (the tests' W = 1 case).
nn::GPT tensor_parallel_gpt(const nn::GPTConfig& config, uint64_t seed, comm::Communicator& tp,
                            bool sequence_parallel = false, const nn::ComputeModes& modes = {});

}  // namespace parallel
