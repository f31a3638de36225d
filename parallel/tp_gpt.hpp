// nanoGPT's GPT with tensor parallelism (Megatron-LM): each of the T ranks of the `tp` group
// holds 1/T of every big weight and computes 1/T of every big matmul.
//
//   ids ─ vocab-parallel wte ─ g ─┐
//   positions ─ wpe ──────────────┴─ + ─ n_layer × Block ─ ln_f ─ f ─ lm_head (wte rows) ─ vocab-parallel loss
//
//   Block: x = x + g( attention_r( f(ln_1(x)) · c_attn_rᵀ ) · c_proj_rᵀ ) + c_proj.bias
//          x = x + g( gelu( f(ln_2(x)) · c_fc_rᵀ ) · mlp.c_proj_rᵀ ) + mlp.c_proj.bias
//
// Split:   c_attn   column-parallel, q, k and v each cut by whole heads (n_head/T heads here,
//                   so attention itself runs locally); mlp.c_fc column-parallel;
//          c_proj, mlp.c_proj  row-parallel; wte by vocabulary rows (V padded to a multiple
//          of T with rows that are never looked up and never predicted).
// Whole on every rank: wpe, the layernorms, the row-parallel biases (their gradients come out
// the same on every rank: f and g make every replicated activation's gradient whole).
//
// Initialisation: the whole model is drawn from the seed (nn::GPT) and this rank keeps its
// slices, so any T starts from exactly the T = 1 model. Dropout on the residual stream uses
// the same random stream on every rank (identical masks); inside attention (a tensor-parallel
// region: different heads per rank) each rank draws its own.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/gpt.hpp"
#include "nn/rng.hpp"

namespace parallel {

// How one parameter is cut across the tensor-parallel group.
enum class TpSplit { replicated, rows, qkv_rows, columns };

struct TpParameter {
  std::string name;   // nanoGPT's state_dict name
  nn::Tensor tensor;  // this rank's part
  TpSplit split;
  nn::Shape full_shape;  // the whole parameter's shape (wte: [V, C], unpadded)
};

class TensorParallelGPT {
 public:
  TensorParallelGPT(const nn::GPTConfig& config, uint64_t seed, comm::Communicator& tp);

  const nn::GPTConfig& config() const { return config_; }
  int64_t padded_vocab() const { return rows_per_rank_ * tp_.size(); }

  // ids, targets [B,T] row-major, the same on every rank of the group → the mean loss.
  nn::Tensor loss(std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T);
  // ids [B,T] → this rank's logits [B,T,V/T] (columns [rank·V/T, …) of the padded vocabulary).
  nn::Tensor local_logits(std::span<const int32_t> ids, int64_t B, int64_t T);
  // nn::GPT::generate's answer: each step gathers the last position's logits over the group
  // (V/T from each rank, padding cut), and every rank draws the same token from `rng`.
  std::vector<int32_t> generate(std::vector<int32_t> prompt, int max_new_tokens, float temperature, int top_k,
                                nn::Rng& rng);

  std::vector<TpParameter>& parameters() { return parameters_; }
  // This rank's part of a whole tensor laid out like parameter `p` (values or a gradient).
  std::vector<float> shard_of(const TpParameter& p, std::span<const float> whole) const;
  // The whole parameter from every rank's part (an all-gather over the group).
  std::vector<float> gather(const TpParameter& p, std::span<const float> mine);

  // The parts as named tensors (for nn::AdamW: its update is element by element, so stepping
  // each rank's part is stepping the whole model, sliced).
  std::vector<nn::NamedTensor> named_parameters() const;
  // Global-norm clipping of the whole model's gradient: Σ g² of the split parameters is summed
  // over the group (each element counted once), the replicated ones' added once (each rank
  // holds the same). Returns the norm before clipping; max_norm ≤ 0 only measures.
  float clip_grad_norm(float max_norm);

  void set_training(bool on) { training_ = on; }
  void zero_grad();

 private:
  struct Block {
    nn::Tensor ln_1_weight, ln_1_bias, c_attn_weight, c_attn_bias, attn_proj_weight, attn_proj_bias;
    nn::Tensor ln_2_weight, ln_2_bias, c_fc_weight, c_fc_bias, mlp_proj_weight, mlp_proj_bias;
  };
  nn::Tensor keep(const nn::GPT& whole, const std::string& name, TpSplit split);
  nn::Tensor maybe_dropout(const nn::Tensor& x);

  nn::GPTConfig config_;
  comm::Communicator& tp_;
  int64_t rows_per_rank_ = 0;  // wte rows per rank: ⌈V/T⌉
  std::vector<TpParameter> parameters_;
  nn::Tensor wte_rows_, wpe_, ln_f_weight_, ln_f_bias_;
  std::vector<Block> blocks_;
  std::vector<int32_t> positions_;
  bool training_ = true;
  nn::Rng dropout_rng_;    // the same on every rank: residual-stream dropout
  nn::Rng attention_rng_;  // this rank's own: dropout inside attention
};

}  // namespace parallel
