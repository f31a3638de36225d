// The layers of nn::GPT that a parallel layout swaps for its own — the one substitution point
// of tensor parallelism (picotron's apply_tensor_parallel; Megatron's ColumnParallelLinear,
// RowParallelLinear, VocabParallelEmbedding and vocab-parallel cross-entropy inside one
// transformer layer). The GPT's block, attention, MLP, fusion, recompute and dropout are
// written once, against these; only what a layer computes, and on which slice, changes:
//
//                       WholeLayers (here)              parallel::TensorParallelLayers
//   parameter at init   the whole tensor                this rank's slice of it, by its role
//   attention heads     all n_head                      n_head/W, from head rank·n_head/W
//   residual stream     [B,T,C]                         [B,T/W,C] while training with SP
//   attention           nn::attention over all T        the same, on its heads
//   column_linear       x·Wᵀ + b          [B,T,out]     f(x)·W_rᵀ + b_r        [B,T,out/W]
//   row_linear          x·Wᵀ + b          [B,T,out]     g(x_r·W_rᵀ) + b        [B,T,out]
//   token_embedding     wte[ids]                        Σ over ranks of its vocabulary rows
//   cross_entropy       over V logits                   over V/W logits per rank, reduced
//
// Context parallelism (parallel::ContextParallelLayers) wraps either: the stream holds T/c
// positions of every sequence, attention goes round the cp group.
//
// A column layer's output feeds a row layer's input (c_attn → attention → c_proj, c_fc →
// GELU → mlp.c_proj); lm_head is a column layer over wte's rows.
//
// How each parameter is cut is declared once, where the model makes it (nn/gpt.cpp): its
// ParameterRole travels with it (nn::NamedTensor::role), and the layers cut, gather and sum
// by the role alone — no layer guesses from a name.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nn/gemm.hpp"  // Precision
#include "nn/ops.hpp"   // attention, DropoutMask
#include "nn/tensor.hpp"

namespace nn {

// What a parameter is to tensor parallelism (Megatron's split), for a weight [out, in]:
//   column            cut by output rows: mlp.c_fc's weight and bias (each rank out/W rows)
//   fused_qkv_column  a column layer whose rows are q | k | v stacked, each cut by whole
//                     heads: attn.c_attn's weight and bias
//   row               cut by input columns: attn.c_proj's and mlp.c_proj's weights
//   vocabulary        cut by vocabulary rows, padded to a multiple of W: wte (= lm_head)
//   replicated        whole on every rank: wpe, the layernorms, the row layers' biases
//   expert            one expert of a mixture (nn/moe_mlp.hpp): whole, but under expert
//                     parallelism held by one rank of each expert-parallel group
//                     (parallel/ep/expert_parallel_layers.hpp), its gradient averaged apart
enum class ParameterRole { replicated, column, fused_qkv_column, row, vocabulary, expert };
const char* name_of(ParameterRole role);

class GPTLayers {
 public:
  virtual ~GPTLayers() = default;

  // This process's part of a parameter with this role, cut from `whole`, its initial value; a
  // tensor that needs gradients. Called once per parameter, in state_dict order, while the
  // model is built.
  virtual Tensor keep(const Tensor& whole, ParameterRole role) = 0;
  // Whether this process holds a cut of parameters with this role (false: it holds them whole).
  virtual bool is_cut(ParameterRole role) const = 0;
  // This process's part of a whole tensor laid out like a parameter with this role (values, a
  // gradient or a moment), and the way back: the whole tensor from every process's part (a
  // collective over the group). `mine`'s shape is this process's part's.
  virtual std::vector<float> shard(ParameterRole role, const Shape& whole_shape,
                                   std::span<const float> whole) const = 0;
  virtual std::vector<float> gather(ParameterRole role, const Shape& mine_shape, std::span<const float> mine) const = 0;
  virtual Shape whole_shape(ParameterRole role, const Shape& mine_shape) const = 0;
  // Σ over the group of a number each process holds part of (Σ g² of its cut parameters).
  virtual double sum_over_group(double mine) const = 0;
  // After backward: the replicated parameters' gradients made whole. Under sequence
  // parallelism each process saw only its own positions, so they are summed over the group;
  // otherwise nothing to do.
  virtual void sum_replicated_grads(std::span<const Tensor> replicated) = 0;

  // The attention heads computed here, out of n_head, and the first of them.
  virtual int local_heads(int n_head) const = 0;
  virtual int first_head(int n_head) const = 0;

  // The residual stream holds S = stream_length(T) of a sequence's T positions, from position
  // first_stream_position(S) — or, under context parallelism, in the two runs stream_place
  // says. `training`: sequence parallelism and context parallelism shard only while training.
  virtual int64_t stream_length(int64_t T, bool training) const = 0;
  virtual int64_t first_stream_position(int64_t S, bool training) const = 0;
  // How many ranks share the positions the stream's layers see whole (sequence parallelism's
  // tp ranks, while training; 1 otherwise): attention's input holds stream_shards × S rows.
  virtual int64_t stream_shards(bool /*training*/) const { return 1; }
  // Where the stream's S positions lie in the sequence: one run from `first`, or (context
  // parallelism's load balance, parallel/cp/context_shard.hpp) S/2 from `first` and S/2 from
  // `second`.
  struct StreamPlace {
    int64_t first = 0;
    int64_t second = -1;  // -1: one run
  };
  virtual StreamPlace stream_place(int64_t S, bool training) const { return {first_stream_position(S, training), -1}; }
  // The whole sequence's length when attention's input holds `rows` positions (c·rows under
  // context parallelism while training).
  virtual int64_t sequence_length(int64_t rows, bool /*training*/) const { return rows; }
  // Causal self-attention of the heads held here, qkv [B,rows,3C'] → [B,rows,C'] (nn::attention;
  // under context parallelism ring or Ulysses attention over the cp group). `dropout`: these
  // heads' weights' mask at their place in the whole [H,T,T].
  virtual Tensor attention(const Tensor& qkv, int heads, const DropoutMask& dropout, AttentionKernel kernel,
                           Precision precision, bool /*training*/) {
    return nn::attention(qkv, heads, dropout, kernel, precision);
  }

  // wte (this process's rows) and ids [B,T] → the token embeddings of the stream's positions [B,S,C].
  virtual Tensor token_embedding(const Tensor& wte, std::span<const int32_t> ids, int64_t B, int64_t T,
                                 bool training) = 0;
  // x: the stream [B,S,C] → [B,T,out/W]: this process's output columns. `family`: the GEMM's
  // name in the profile.
  virtual Tensor column_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family,
                               Precision precision, bool training) = 0;
  // x [B,T,in/W]: this process's input columns → the stream [B,S,out], the bias added once.
  virtual Tensor row_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family,
                            Precision precision, bool training) = 0;
  // lm_head's logits (this process's vocabulary columns [B,T,V/W]) → the mean cross-entropy
  // over the whole vocabulary (targets equal to -1 are ignored).
  virtual Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets) = 0;
  // One position's logits over this process's vocabulary columns → over the whole vocabulary.
  virtual void gather_vocabulary(std::span<const float> mine, std::span<float> whole) = 0;

  // A mixture of experts (nn/moe_mlp.hpp). Whether this process holds expert e of E (expert
  // parallelism: E/ep of them); a block allocates only those.
  virtual bool holds_expert(int /*expert*/, int /*n_experts*/) const { return true; }
  // The experts on the rows routed to them: tokens [N,C] and, per expert e of E, the rows of
  // `tokens` that chose it (slot order) → per expert, its output [M_e,C] for those rows
  // (undefined when it has none). `expert(e, x)` computes expert e — one held here — on x [M,C].
  // Here: each expert on its own rows; expert parallelism sends each row to the rank holding
  // its expert and the outputs back (a collective over the ep group, every forward).
  using ExpertFunction = std::function<Tensor(int expert, const Tensor& rows)>;
  virtual std::vector<Tensor> run_experts(const Tensor& tokens, std::span<const std::vector<int32_t>> rows,
                                          const ExpertFunction& expert);
};

// Every layer whole, on one process: nn::GPT's default.
class WholeLayers final : public GPTLayers {
 public:
  Tensor keep(const Tensor& whole, ParameterRole) override { return whole; }
  bool is_cut(ParameterRole) const override { return false; }
  std::vector<float> shard(ParameterRole, const Shape&, std::span<const float> whole) const override {
    return {whole.begin(), whole.end()};
  }
  std::vector<float> gather(ParameterRole, const Shape&, std::span<const float> mine) const override {
    return {mine.begin(), mine.end()};
  }
  Shape whole_shape(ParameterRole, const Shape& mine_shape) const override { return mine_shape; }
  double sum_over_group(double mine) const override { return mine; }
  void sum_replicated_grads(std::span<const Tensor>) override {}
  int local_heads(int n_head) const override { return n_head; }
  int first_head(int) const override { return 0; }
  int64_t stream_length(int64_t T, bool) const override { return T; }
  int64_t first_stream_position(int64_t, bool) const override { return 0; }
  Tensor token_embedding(const Tensor& wte, std::span<const int32_t> ids, int64_t B, int64_t T, bool) override;
  Tensor column_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family,
                       Precision precision, bool) override;
  Tensor row_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family, Precision precision,
                    bool) override;
  Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets) override;
  void gather_vocabulary(std::span<const float> mine, std::span<float> whole) override;
};

// Layers that change a few of another's and pass the rest through to it (context parallelism
// changes attention and the stream's positions, expert parallelism where experts run).
class LayersAround : public GPTLayers {
 public:
  explicit LayersAround(std::shared_ptr<GPTLayers> inner) : inner_(std::move(inner)) {}
  Tensor keep(const Tensor& whole, ParameterRole role) override { return inner_->keep(whole, role); }
  bool is_cut(ParameterRole role) const override { return inner_->is_cut(role); }
  std::vector<float> shard(ParameterRole role, const Shape& whole_shape, std::span<const float> whole) const override {
    return inner_->shard(role, whole_shape, whole);
  }
  std::vector<float> gather(ParameterRole role, const Shape& mine_shape, std::span<const float> mine) const override {
    return inner_->gather(role, mine_shape, mine);
  }
  Shape whole_shape(ParameterRole role, const Shape& mine_shape) const override {
    return inner_->whole_shape(role, mine_shape);
  }
  double sum_over_group(double mine) const override { return inner_->sum_over_group(mine); }
  void sum_replicated_grads(std::span<const Tensor> replicated) override { inner_->sum_replicated_grads(replicated); }
  int local_heads(int n_head) const override { return inner_->local_heads(n_head); }
  int first_head(int n_head) const override { return inner_->first_head(n_head); }
  int64_t stream_length(int64_t T, bool training) const override { return inner_->stream_length(T, training); }
  int64_t first_stream_position(int64_t S, bool training) const override {
    return inner_->first_stream_position(S, training);
  }
  int64_t stream_shards(bool training) const override { return inner_->stream_shards(training); }
  StreamPlace stream_place(int64_t S, bool training) const override { return inner_->stream_place(S, training); }
  int64_t sequence_length(int64_t rows, bool training) const override { return inner_->sequence_length(rows, training); }
  Tensor attention(const Tensor& qkv, int heads, const DropoutMask& dropout, AttentionKernel kernel,
                   Precision precision, bool training) override {
    return inner_->attention(qkv, heads, dropout, kernel, precision, training);
  }
  Tensor token_embedding(const Tensor& wte, std::span<const int32_t> ids, int64_t B, int64_t T,
                         bool training) override {
    return inner_->token_embedding(wte, ids, B, T, training);
  }
  Tensor column_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family,
                       Precision precision, bool training) override {
    return inner_->column_linear(x, weight, bias, family, precision, training);
  }
  Tensor row_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family, Precision precision,
                    bool training) override {
    return inner_->row_linear(x, weight, bias, family, precision, training);
  }
  Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets) override {
    return inner_->cross_entropy(logits, targets);
  }
  void gather_vocabulary(std::span<const float> mine, std::span<float> whole) override {
    inner_->gather_vocabulary(mine, whole);
  }
  bool holds_expert(int expert, int n_experts) const override { return inner_->holds_expert(expert, n_experts); }
  std::vector<Tensor> run_experts(const Tensor& tokens, std::span<const std::vector<int32_t>> rows,
                                  const ExpertFunction& expert) override {
    return inner_->run_experts(tokens, rows, expert);
  }

 protected:
  std::shared_ptr<GPTLayers> inner_;
};

}  // namespace nn
