// nanoGPT's GPT with tensor parallelism (Megatron-LM): each of the W ranks of the `tp` group
// holds 1/W of every big weight and computes 1/W of every big matmul.
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
// Initialisation: the whole model (or the stage's part of it) is drawn from the seed (nn::GPT)
// and this rank keeps its slices, so any W starts from exactly the W = 1 model. Dropout masks
// are those of the one-process model (nn/dropout_mask.hpp): on the residual stream every rank
// draws the same mask, inside attention each rank the part of its heads, on a sequence-parallel
// shard the part of its positions — each slice placed in the whole tensor, so no W changes them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/gpt.hpp"
#include "nn/rng.hpp"
#include "parallel/stage_model.hpp"

namespace parallel {

// How one parameter is cut across the tensor-parallel group.
enum class TpSplit { replicated, rows, qkv_rows, columns };

struct TpParameter {
  std::string name;   // nanoGPT's state_dict name
  nn::Tensor tensor;  // this rank's part
  TpSplit split;
  nn::Shape full_shape;  // the whole parameter's shape (wte: [V, C], unpadded)
};

class TensorParallelGPT final : public StageModel {
 public:
  // The whole model, or a pipeline stage's `part` of it (train_3d). With sequence_parallel,
  // training activations outside the tensor-parallel regions are [B, T/tp, C]
  // (parallel/tp/sequence_parallel_ops.hpp); evaluation and generation keep them whole (no
  // backward to save memory for, and any length T).
  TensorParallelGPT(const nn::GPTConfig& config, uint64_t seed, comm::Communicator& tp, bool sequence_parallel = false,
                    std::optional<nn::GPTPart> part = std::nullopt, const nn::ComputeModes& modes = {});

  const nn::GPTConfig& config() const override { return config_; }
  const nn::GPTPart& part() const { return part_; }
  const nn::ComputeModes& modes() const { return modes_; }
  int64_t padded_vocab() const { return rows_per_rank_ * tp_.size(); }
  bool sequence_parallel() const { return sequence_parallel_; }

  // ids, targets [B,T] row-major, the same on every rank of the group → the mean loss (whole model).
  nn::Tensor loss(std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T);
  // ids [B,T] → this rank's logits [B,T,V/W] (columns [rank·V/W, …) of the padded vocabulary).
  nn::Tensor local_logits(std::span<const int32_t> ids, int64_t B, int64_t T);
  // nn::GPT::generate's answer: each step gathers the last position's logits over the group
  // (V/W from each rank, padding cut), and every rank draws the same token from `rng`.
  std::vector<int32_t> generate(std::vector<int32_t> prompt, int max_new_tokens, float temperature, int top_k,
                                nn::Rng& rng);

  // The pieces, as a pipeline stage (StageModel). The activation between them is [B,T,C], or
  // [B,T/tp,C] (this rank's positions) while training with sequence parallelism.
  nn::Tensor embed(std::span<const int32_t> ids, int64_t B, int64_t T) override;
  nn::Tensor run_blocks(nn::Tensor x) override;
  nn::Tensor run_chunk(nn::Tensor x, int chunk) override;
  int chunks() const override { return static_cast<int>(part_.chunks.size()); }
  nn::Tensor head_loss(const nn::Tensor& x, std::span<const int32_t> targets) override;
  void next_token_logits(const nn::Tensor& x, int64_t T, float temperature, std::span<float> logits) override;
  nn::Shape activation_shape(int64_t B, int64_t T) const override;
  void set_training(bool on) override { training_ = on; }
  bool training() const override { return training_; }

  std::vector<TpParameter>& parameters() { return parameters_; }
  // This rank's part of a whole tensor laid out like parameter `p` (values or a gradient).
  std::vector<float> shard_of(const TpParameter& p, std::span<const float> whole) const;
  // The whole parameter from every rank's part (an all-gather over the group).
  std::vector<float> gather(const TpParameter& p, std::span<const float> mine);
  // This rank's wte rows (the embedding's, or the head's copy on a last stage); undefined when
  // the part has neither.
  const nn::Tensor& tied_embedding() const { return wte_rows_; }

  // The parts as named tensors (for nn::AdamW: its update is element by element, so stepping
  // each rank's part is stepping the whole model, sliced).
  std::vector<nn::NamedTensor> named_parameters() const;
  // Sequence parallelism: each rank's replicated parameters (layernorms, wpe, row-parallel
  // biases) saw only its own positions, so their gradients are summed over the group. Call
  // after backward; nothing to do without sequence parallelism.
  void sum_replicated_grads();
  // Σ g² of this part, the same on every rank of the group: the split parameters' squares
  // summed over the group (each element counted once), the replicated ones' once. A last
  // stage's copy of wte is left out (the first stage counts it).
  double squared_grad_norm();
  // Global-norm clipping of the whole model's gradient (whole model only). Returns the norm
  // before clipping; max_norm ≤ 0 only measures.
  float clip_grad_norm(float max_norm);

  // For overlapped data-parallel averaging (train_3d), as nn::GPT's: called during backward
  // each time a group — the embeddings, one block, ln_f (with a last stage's wte copy) — has
  // its last gradient, with their indices in parameters().
  void set_grad_ready_hook(nn::GPT::GradReadyHook hook) { grad_ready_hook_ = std::move(hook); }

  // The batch the next forwards run on, for their dropout masks (nn::GPT's).
  void set_dropout_batch(const nn::DropoutBatch& batch) { dropout_batch_ = batch; }
  void zero_grad();

 private:
  nn::Tensor keep(const nn::GPT& whole, const std::string& name, TpSplit split);
  bool sharded() const { return sequence_parallel_ && training_; }
  // x [B,S,C]: the whole stream (S = T), or this rank's positions under sequence parallelism.
  nn::Tensor maybe_dropout(const nn::Tensor& x, const nn::DropoutBatch& batch, nn::DropoutSite which, int layer);
  std::pair<nn::Tensor, nn::Tensor> block_forward(const nn::BlockWeights& b, int layer, const nn::DropoutBatch& batch,
                                                  nn::Tensor x, nn::Tensor previous_mlp_out);
  // Blocks from {x, an MLP output still to add} → the same (tp/tensor_parallel_gpt.cpp); run_blocks_open: every chunk.
  std::pair<nn::Tensor, nn::Tensor> run_chunk_open(nn::Tensor x, nn::Tensor mlp_out, int chunk);
  std::pair<nn::Tensor, nn::Tensor> run_blocks_open(nn::Tensor x);
  // Into a column-parallel layer (f, or the all-gather of the shards) and out of a row-parallel
  // one (g, or the reduce-scatter into shards), with the bias added once after the sum.
  nn::Tensor column_in(const nn::Tensor& x, const nn::Tensor& weight, const nn::Tensor& bias);
  nn::Tensor row_out(const nn::Tensor& x, const nn::Tensor& weight, const nn::Tensor& bias);
  nn::Tensor head_local_logits(const nn::Tensor& x, const nn::Tensor& mlp_out = {});
  nn::Tensor vocab_loss(const nn::Tensor& local_logits, std::span<const int32_t> targets);
  std::vector<int> indices_from(std::size_t first) const;  // parameters first … last
  void mark_grad_ready(const std::vector<int>& group);     // a marker on the tape: see nn::GPT

  nn::GPTConfig config_;
  nn::GPTPart part_;
  nn::ComputeModes modes_;
  comm::Communicator& tp_;
  bool sequence_parallel_ = false;
  int64_t rows_per_rank_ = 0;  // wte rows per rank: ⌈V/T⌉
  std::vector<TpParameter> parameters_;
  nn::Tensor wte_rows_, wpe_, ln_f_weight_, ln_f_bias_;
  std::vector<nn::BlockWeights> blocks_;
  std::vector<int> block_ids_;  // their global numbers
  nn::GPT::GradReadyHook grad_ready_hook_;
  std::vector<int> embedding_group_, ln_f_group_;  // indices into parameters_
  std::vector<std::vector<int>> block_groups_;     // per block held
  std::vector<int32_t> positions_;
  bool training_ = true;
  nn::DropoutBatch dropout_batch_;
};

}  // namespace parallel
