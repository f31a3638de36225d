// The tensor-parallel layers substituted into nn::GPT (nn/gpt_layers.hpp; Megatron-LM): each
// of the W ranks of the `tp` group holds 1/W of every big weight and computes 1/W of every
// big matmul.
//
//   ids ─ vocab-parallel wte ─ g ─┐
//   positions ─ wpe ──────────────┴─ + ─ n_layer × Block ─ ln_f ─ f ─ lm_head (wte rows) ─ vocab-parallel loss
//
//   Block: x = x + g( attention_r( f(ln_1(x)) · c_attn_rᵀ ) · c_proj_rᵀ ) + c_proj.bias
//          x = x + g( gelu( f(ln_2(x)) · c_fc_rᵀ ) · mlp.c_proj_rᵀ ) + mlp.c_proj.bias
//
// Split:   c_attn   column-parallel, q, k and v each cut by whole heads (n_head/W heads here,
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
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/gpt.hpp"
#include "nn/gpt_layers.hpp"

namespace parallel {

// How one parameter is cut across the tensor-parallel group.
enum class TpSplit { replicated, rows, qkv_rows, columns };

struct TpParameter {
  std::string name;   // nanoGPT's state_dict name
  nn::Tensor tensor;  // this rank's part
  TpSplit split;
  nn::Shape full_shape;  // the whole parameter's shape (wte: [V, C], unpadded)
};

class TensorParallelLayers final : public nn::GPTLayers {
 public:
  // Refuses (nn::Error) n_head not divisible by W, and, with sequence parallelism, block_size.
  TensorParallelLayers(const nn::GPTConfig& config, comm::Communicator& tp, bool sequence_parallel);

  nn::Tensor keep(const std::string& name, const nn::Tensor& whole) override;
  int local_heads(int n_head) const override { return n_head / tp_.size(); }
  int first_head(int n_head) const override { return tp_.rank() * local_heads(n_head); }
  int64_t stream_length(int64_t T, bool training) const override;
  int64_t first_stream_position(int64_t S, bool training) const override;
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
  int64_t padded_vocab() const { return rows_per_rank_ * tp_.size(); }
  // Every parameter kept, in the model's order, with how it is cut.
  const std::vector<TpParameter>& kept() const { return kept_; }
  // This rank's part of a whole tensor laid out like parameter `p` (values or a gradient).
  std::vector<float> shard_of(const TpParameter& p, std::span<const float> whole) const;
  // The whole parameter from every rank's part (an all-gather over the group).
  std::vector<float> gather(const TpParameter& p, std::span<const float> mine) const;

 private:
  bool sharded(bool training) const { return sequence_parallel_ && training; }

  comm::Communicator& tp_;
  bool sequence_parallel_;
  int vocab_size_;
  int64_t rows_per_rank_;  // wte rows per rank: ⌈V/W⌉
  std::vector<TpParameter> kept_;
};

}  // namespace parallel
