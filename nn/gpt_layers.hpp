// What a parallel layout substitutes into nn::GPT, split by concern — the one substitution point
// of every dimension (picotron's apply_tensor_parallel; Megatron's ColumnParallelLinear,
// RowParallelLinear, VocabParallelEmbedding inside one transformer layer; Megatron core's MoE
// token dispatcher). The GPT's block, attention, MLP, fusion, recompute and dropout are written
// once, against these three; only what a layer computes, and on which slice, changes:
//
//   WeightCut (cutting weights)         WholeWeights (here)       parallel::TensorParallelLayers
//     parameter at init                 the whole tensor          this rank's slice, by its role
//     attention heads                   all n_head                n_head/W, from head rank·n_head/W
//     column_linear                     x·Wᵀ + b   [B,T,out]      f(x)·W_rᵀ + b_r        [B,T,out/W]
//     row_linear                        x·Wᵀ + b   [B,T,out]      g(x_r·W_rᵀ) + b        [B,T,out]
//     token_embedding                   wte[ids]                  Σ over ranks of its vocabulary rows
//     cross_entropy                     over V logits             over V/W logits per rank, reduced
//
//   SequenceLayout (the sequence's layout)  WholeSequence (here)  TensorParallelLayers (SP),
//                                                                 parallel::ContextParallelSequence
//     residual stream                   [B,T,C]                   [B,T/W,C] while training with SP;
//                                                                 [B,T/c,C] (two chunks) under cp
//     attention                         nn::attention over all T  ring or Ulysses over the cp group
//
//   TokenDispatcher (experts' dispatch)  LocalDispatcher (here)    parallel::ExpertParallelDispatcher
//     experts held                      all E                     E/ep, from ep rank·E/ep
//     run_experts                       each expert on its rows   rows to their expert's rank and back
//
// A column layer's output feeds a row layer's input (c_attn → attention → c_proj, c_fc →
// GELU → mlp.c_proj); lm_head is a column layer over wte's rows. How each parameter is cut is
// declared once, where the model makes it (nn/gpt.cpp): its ParameterRole travels with it
// (nn::NamedTensor::role), and the layers cut, gather and sum by the role alone.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nn/gemm.hpp"  // Precision
#include "nn/ops.hpp"   // attention, DropoutMask
#include "nn/parameter_role.hpp"
#include "nn/tensor.hpp"

namespace nn {

// ---- cutting weights ------------------------------------------------------------------------

class WeightCut {
 public:
  virtual ~WeightCut() = default;
  // This process's part of a parameter with this role, cut from `whole`, its initial value; a
  // tensor that needs gradients. Called once per parameter, in state_dict order.
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
  // parallelism each process saw only its own positions, so they are summed over the group.
  virtual void sum_replicated_grads(std::span<const Tensor> replicated) = 0;
  // The attention heads computed here, out of n_head, and the first of them.
  virtual int local_heads(int n_head) const = 0;
  virtual int first_head(int n_head) const = 0;
  // wte (this process's rows) and ids [B,T] (the positions this rank's sequence layout holds,
  // SequenceLayout::picked) → the token embeddings of the stream's positions [B,S,C].
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
};

// Every weight whole, on one process.
class WholeWeights final : public WeightCut {
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
  Tensor token_embedding(const Tensor& wte, std::span<const int32_t> ids, int64_t B, int64_t T, bool) override;
  Tensor column_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family,
                       Precision precision, bool) override;
  Tensor row_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family, Precision precision,
                    bool) override;
  Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets) override;
  void gather_vocabulary(std::span<const float> mine, std::span<float> whole) override;
};

// ---- the sequence's layout --------------------------------------------------------------------

class SequenceLayout {
 public:
  virtual ~SequenceLayout() = default;
  // The residual stream holds S = stream_length(T) of a sequence's T positions. `training`:
  // sequence and context parallelism shard only while training.
  virtual int64_t stream_length(int64_t T, bool training) const = 0;
  // How many ranks share the positions the stream's layers see whole (sequence parallelism's
  // tp ranks, while training; 1 otherwise): attention's input holds stream_shards × S rows.
  virtual int64_t stream_shards(bool training) const = 0;
  // Where the stream's S positions lie in the sequence: one run from `first`, or (context
  // parallelism's load balance, parallel/cp/context_shard.hpp) S/2 from `first` and S/2 from
  // `second`.
  struct StreamPlace {
    int64_t first = 0;
    int64_t second = -1;  // -1: one run
  };
  virtual StreamPlace stream_place(int64_t S, bool training) const = 0;
  // The whole sequence's length when attention's input holds `rows` positions (c·rows under
  // context parallelism while training).
  virtual int64_t sequence_length(int64_t rows, bool training) const = 0;
  // The ids (or targets) of the positions this rank's layers take whole, from a batch's [B,T]:
  // all of them, or (context parallelism) the rank's T/c — and that length.
  virtual std::vector<int32_t> picked(std::span<const int32_t> whole, int64_t B, int64_t T, bool training) const = 0;
  virtual int64_t picked_length(int64_t T, bool training) const = 0;
  // Causal self-attention of the heads held here, qkv [B,rows,3C'] → [B,rows,C'] (nn::attention;
  // under context parallelism ring or Ulysses attention over the cp group). `dropout`: these
  // heads' weights' mask at their place in the whole [H,T,T].
  virtual Tensor attention(const Tensor& qkv, int heads, const DropoutMask& dropout, AttentionKernel kernel,
                           Precision precision, bool training) = 0;
  // A mixture's routing (nn/moe_mlp.hpp) counts each expert's capacity over a whole sequence,
  // position by position. `mine` [G,runs,E]: the choices per expert of each run of positions
  // the stream holds (1 run, or 2: stream_place) → `before` [G,runs,E], the choices of all the
  // sequence's positions before each run, and `whole` [G,E], the whole sequence's. Here: every
  // run is this rank's (context parallelism gathers the other ranks' counts).
  virtual void count_choices(std::span<const int64_t> mine, int64_t G, int runs, int E, std::span<int64_t> before,
                             std::span<int64_t> whole, bool training);
};

// Every position on every process: the stream is the whole sequence.
class WholeSequence : public SequenceLayout {
 public:
  int64_t stream_length(int64_t T, bool) const override { return T; }
  int64_t stream_shards(bool) const override { return 1; }
  StreamPlace stream_place(int64_t, bool) const override { return {0, -1}; }
  int64_t sequence_length(int64_t rows, bool) const override { return rows; }
  std::vector<int32_t> picked(std::span<const int32_t> whole, int64_t, int64_t, bool) const override {
    return {whole.begin(), whole.end()};
  }
  int64_t picked_length(int64_t T, bool) const override { return T; }
  Tensor attention(const Tensor& qkv, int heads, const DropoutMask& dropout, AttentionKernel kernel,
                   Precision precision, bool) override {
    return nn::attention(qkv, heads, dropout, kernel, precision);
  }
};

// ---- the experts' dispatch ---------------------------------------------------------------------

class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;
  // Whether this process holds expert e of E (expert parallelism: E/ep of them); a block
  // allocates only those.
  virtual bool holds_expert(int expert, int n_experts) const = 0;
  // The experts on the rows routed to them: tokens [N,C] and, per expert e of E, the rows of
  // `tokens` that chose it (slot order) → per expert, its output [M_e,C] for those rows
  // (undefined when it has none). `expert(e, x)` computes expert e — one held here — on x [M,C].
  using ExpertFunction = std::function<Tensor(int expert, const Tensor& rows)>;
  virtual std::vector<Tensor> run_experts(const Tensor& tokens, std::span<const std::vector<int32_t>> rows,
                                          const ExpertFunction& expert) = 0;
  // Σ over the processes that share the experts of a number each holds part of (Σ g² of its experts).
  virtual double sum_over_holders(double mine) const = 0;
};

// Every expert here, each on its own rows.
class LocalDispatcher final : public TokenDispatcher {
 public:
  bool holds_expert(int, int) const override { return true; }
  std::vector<Tensor> run_experts(const Tensor& tokens, std::span<const std::vector<int32_t>> rows,
                                  const ExpertFunction& expert) override;
  double sum_over_holders(double mine) const override { return mine; }
};

// ---- the three, as a model takes them --------------------------------------------------------

struct GPTLayers {
  std::shared_ptr<WeightCut> weights;
  std::shared_ptr<SequenceLayout> sequence;
  std::shared_ptr<TokenDispatcher> dispatcher;
  // Each one left null filled with the whole one.
  GPTLayers filled() const;
};

}  // namespace nn
