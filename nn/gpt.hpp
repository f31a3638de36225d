// GPT, the nanoGPT architecture:
//
//   ids [B,T] ─ wte ─┐
//   positions  ─ wpe ─┴─ + ─ dropout ─ n_layer × Block ─ ln_f ─ lm_head (= wteᵀ, tied) ─ logits [B,T,V]
//
//   Block:  x = x + dropout(c_proj(attention(c_attn(ln_1(x)))))
//           x = x + dropout(mlp.c_proj(gelu(mlp.c_fc(ln_2(x)))))        (MLP 4× wide)
//
// Parameters carry nanoGPT's state_dict names (transformer.h.0.attn.c_attn.weight, ...) and
// nn.Linear's [out, in] layout, so checkpoints load into PyTorch unchanged.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/autograd.hpp"
#include "nn/compute_modes.hpp"
#include "nn/dropout_mask.hpp"
#include "nn/error.hpp"
#include "nn/gpt_layers.hpp"
#include "nn/moe_mlp.hpp"
#include "nn/named_tensor.hpp"
#include "nn/rng.hpp"
#include "nn/tensor.hpp"

namespace nn {

// The largest dropout rate: one rule for the flag (--dropout) and for a checkpoint's config.
// 1 would drop everything, and rates just below it scale by huge factors (1/(1 − p)).
inline constexpr double kMaxDropout = 0.99;  // compared as a float: the rate a model holds

struct GPTConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int block_size = 64;
  int vocab_size = 65;
  float dropout = 0.0f;
  bool bias = false;
  // A mixture of experts (nn/moe_mlp.hpp) in place of the MLP of every moe_every-th block —
  // blocks moe_every − 1, 2·moe_every − 1, … — when n_experts > 0; dense otherwise.
  int n_experts = 0;
  int experts_per_token = 1;
  double capacity_factor = 1.25;
  int moe_every = 1;
  float aux_loss_weight = 0.01f;
  bool is_moe_block(int layer) const { return n_experts > 0 && (layer + 1) % moe_every == 0; }
  MoESettings moe() const { return {n_experts, experts_per_token, capacity_factor, aux_loss_weight, block_size}; }

  void validate() const;  // throws nn::Error naming the bad field
  nlohmann::json to_json() const;
  static GPTConfig from_json(const nlohmann::json& j);  // throws nn::Error naming a missing/bad field
  bool operator==(const GPTConfig&) const = default;
};

// Which pieces of the model an object holds: the whole model, or what one pipeline stage
// owns — the embedding (wte + wpe + dropout), chunks of blocks (global numbers, so parameter
// names stay nanoGPT's: one chunk [first, end) per stage, or V of them under interleaved
// 1F1B, where stage r holds chunks r, r + P, …), and the head (ln_f + lm_head + loss). The
// head needs wte (lm_head is tied to it): a last stage without the embedding holds its own
// copy, kept equal to the first stage's by summing their gradients (parallel/pp/tied_embedding).
struct BlockRange {
  int first = 0, end = 0;  // blocks [first, end)
};
struct GPTPart {
  bool embedding = true;
  std::vector<BlockRange> chunks;  // in model order, disjoint
  bool head = true;
  static GPTPart whole(const GPTConfig& config);
  bool is_whole(const GPTConfig& config) const;
  bool owns_block(int l) const;
};

// The batch a forward runs on, as its dropout masks see it (nn/dropout_mask.hpp): the run's
// seed, the optimizer step, and the micro-batch's first sample in the step's global batch.
struct DropoutBatch {
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t first_sample = 0;
};
// Which dropout of the model: the embedding's, then three in every block.
enum class DropoutSite { embedding, attention_weights, attention_output, mlp_output };
// The mask's site number: 0 for the embedding, 1 + 3·layer + 0|1|2 for block `layer`'s.
int64_t dropout_site(DropoutSite which, int layer);
// The mask of `which` for `batch` when training with rate p, a slice of whose rows starts
// `first_element` into each sample's whole tensor; p = 0 (no mask) when not training.
DropoutMask dropout_mask(float p, bool training, const DropoutBatch& batch, DropoutSite which, int layer,
                         int64_t first_element = 0);


// A transformer block's tensors: whole, or this rank's slices under tensor parallelism
// (WeightCut::keep). Biases stay undefined when GPTConfig::bias is false. A mixture-of-experts
// block has `moe` (router and experts) in place of the MLP's four tensors (undefined there).
struct BlockWeights {
  Tensor ln_1_weight, ln_1_bias, c_attn_weight, c_attn_bias, attn_proj_weight, attn_proj_bias;
  Tensor ln_2_weight, ln_2_bias, c_fc_weight, c_fc_bias, mlp_proj_weight, mlp_proj_bias;
  MoEWeights moe;
};
// Each of them in nanoGPT's state_dict order: its name after "transformer.h.<l>.", its field,
// its shape in units of n_embd C — [rows·C, columns·C], or [rows·C] when columns is 0 — and
// its role under tensor parallelism (the one place a block's split is declared).
struct BlockTensor {
  const char* name;
  Tensor BlockWeights::*field;
  int rows, columns;
  bool bias;
  ParameterRole role;
};
const std::array<BlockTensor, 12>& block_tensors();

// The model, written once, and the one model type of every layout: on one process, as a
// pipeline stage's part, and — with `layers` swapped for tensor-parallel ones
// (nn/gpt_layers.hpp, parallel/tp/tensor_parallel_layers.hpp) — as one rank's slice of every
// big matmul.
class GPT {
 public:
  // nanoGPT's initialisation, from `seed`; `modes`: how it computes (precision, attention
  // kernel, recompute, fusion), for its whole life.
  GPT(const GPTConfig& config, uint64_t seed, const ComputeModes& modes = {});
  // A part of it: allocates only the part's parameters (and their gradients), initialised
  // with exactly the values the whole model would give them. `layers`: what computes the
  // linears, the embedding and the loss and on which slice, where the sequence's positions lie,
  // where its experts run (nn/gpt_layers.hpp; each one left null: the whole one).
  GPT(const GPTConfig& config, uint64_t seed, const GPTPart& part, const ComputeModes& modes = {},
      const GPTLayers& layers = {});

  const GPTConfig& config() const { return config_; }
  const ComputeModes& modes() const { return modes_; }
  const GPTPart& part() const { return part_; }
  // What computes its linears, embedding and loss, and on which slice (whole, or tensor-parallel).
  const GPTLayers& layers() const { return layers_; }
  // wte, the tied embedding (this process's rows of it): the embedding's, or the head's copy on
  // a last pipeline stage; undefined when this part has neither.
  Tensor tied_embedding() const { return wte_; }

  // The pieces, for a pipeline stage (forward and backward of each are on the tape). The
  // stream x is [B,S,C]: S = T, or this rank's T/W positions under sequence parallelism.
  Tensor embed(std::span<const int32_t> ids, int64_t B, int64_t T);     // ids [B,T] → x [B,S,C]
  Tensor run_blocks(Tensor x);                                          // x [B,S,C] → [B,S,C], every chunk
  Tensor run_chunk(Tensor x, int chunk);                                // the blocks of part().chunks[chunk]
  Tensor head_logits(const Tensor& x);                                  // ln_f, lm_head → [B,T,V]
  Tensor head_loss(const Tensor& x, std::span<const int32_t> targets);  // → mean cross-entropy

  // ids and targets are [B,T] row-major, T ≤ block_size. forward → logits [B,T,V] (this
  // rank's vocabulary columns [B,T,V/W] under tensor parallelism); loss → mean cross-entropy
  // (targets equal to -1 are ignored).
  Tensor forward(std::span<const int32_t> ids, int64_t B, int64_t T);
  Tensor loss(std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T);

  // Appends max_new_tokens sampled tokens to prompt: the context is cropped to the last
  // block_size tokens, logits divided by temperature, only the top_k kept (0 = all).
  std::vector<int32_t> generate(std::vector<int32_t> prompt, int max_new_tokens, float temperature, int top_k,
                                Rng& rng);
  // The head's part of one generation step: x [1,T,C] after the blocks → the logits of the
  // next token (after position T−1) divided by the temperature, into `logits` [V].
  void next_token_logits(const Tensor& x, int64_t T, float temperature, std::span<float> logits);
  // The activation between the pieces for a batch of B×T tokens: [B,T,C], or [B,T/W,C] while
  // training with sequence parallelism.
  Shape activation_shape(int64_t B, int64_t T) const;

  // The distinct parameter tensors this object holds, in state_dict order (lm_head.weight is
  // wte, not listed).
  std::vector<NamedTensor>& parameters() { return parameters_; }
  const std::vector<NamedTensor>& parameters() const { return parameters_; }
  // nanoGPT's state_dict: the parameters plus lm_head.weight (the same tensor as wte).
  std::vector<NamedTensor> state_dict() const;
  Tensor& parameter(const std::string& name);

  // nanoGPT's get_num_params(): by default without the position embedding. active_params:
  // the parameters one token uses (a mixture's k experts of E, and its router).
  int64_t num_params(bool non_embedding = true) const;
  double active_params() const;
  // Model FLOPs per token for a forward+backward pass at context T (nanoGPT's estimate_mfu).
  double flops_per_token(int64_t T) const;

  void set_training(bool on) { training_ = on; }  // dropout only while training
  // What the training loop multiplies the loss by before backward (1/micro-batches when it
  // averages them): the mixtures' balancing losses join the gradient with the same factor.
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  // The routing of the mixture blocks held here, summed over the training forwards since clear().
  RoutingStats& routing_stats() { return routing_stats_; }
  bool training() const { return training_; }
  // The batch the next forwards run on, for their dropout masks. Until it is set: the seed
  // given at construction, step 0, first sample 0 — the same masks on every forward, so a
  // training loop sets it before each micro-batch (the trainers do).
  void set_dropout_batch(const DropoutBatch& batch) { dropout_batch_ = batch; }
  void zero_grad();

  // Gradients after backward, for any layout of this part. sum_replicated_grads: the
  // replicated parameters' gradients made whole over the tensor-parallel group (sequence
  // parallelism; nothing otherwise). squared_grad_norm: Σ g² of this part, the same on every
  // rank of the group — the cut parameters' squares summed over the group, each element
  // counted once; a head-only stage's copy of wte left out (the first stage counts it).
  void sum_replicated_grads();
  double squared_grad_norm() const;

  // For data-parallel overlap (parallel/dp/gradient_averaging.hpp): during backward, called each
  // time a group of parameters — one block, ln_f, or the embeddings (wte last: lm_head shares
  // it) — has received its last gradient contribution, with their indices in parameters().
  // It works by recording a marker on the tape just before the group's first use in forward:
  // the tape runs in reverse, so the marker runs after every backward step that uses the group.
  using GradReadyHook = std::function<void(std::span<const int> parameter_indices)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_hook_ = std::move(hook); }

  // For ZeRO-3 (parallel/zero.hpp), which keeps only a shard of the parameters between uses:
  // `before` runs just before each use of a parameter group and `after` just after it — in
  // forward, and again around the same ops' backward (markers on the tape; backward = true).
  // Groups of the whole model: 0 = the embeddings (wte, wpe; wte is used again by lm_head),
  // 1 + l = block l, n_layer + 1 = ln_f.
  struct GroupUseHooks {
    std::function<void(int group, bool backward)> before, after;
  };
  void set_group_use_hooks(GroupUseHooks hooks) { group_use_hooks_ = std::move(hooks); }
  // Each group's indices into parameters(), in that numbering (the whole model only).
  std::vector<std::vector<int>> parameter_groups() const;
  // For any part: the groups the grad-ready hook reports (its embeddings, each block, ln_f
  // with a last stage's copy of wte), the empty ones left out.
  std::vector<std::vector<int>> grad_ready_groups() const;

 private:
  Tensor add_parameter(const std::string& name, const Tensor& whole, ParameterRole role);  // keeps this process's part
  // nanoGPT's initialisation of one parameter, drawn from `rng` in state_dict order; one this
  // part does not own still draws its numbers (keeping the stream in step) and is not made.
  Tensor init_parameter(Rng& rng, const std::string& name, Shape shape, bool owned, ParameterRole role);
  Tensor init_bias(Rng& rng, const std::string& name, int64_t n, bool owned, ParameterRole role);  // none without --bias
  std::vector<int> indices_from(std::size_t first) const;  // parameters first … last
  void init_blocks(Rng& rng);  // the part's blocks and their groups
  Tensor final_norm(const Tensor& x, const Tensor& mlp_out = {});  // ln_f
  Tensor lm_head(const Tensor& h);                                  // tied to wte: [B,T,C] → [B,T,V]
  // A chunk's blocks from {x, an MLP output still to add} → the same (see gpt.cpp).
  std::pair<Tensor, Tensor> run_chunk_open(Tensor x, Tensor mlp_out, int chunk);
  std::pair<Tensor, Tensor> run_blocks_open(Tensor x);  // every chunk, the same way
  void require_whole(const char* what) const;
  // x: the stream [B,S,C]; its mask placed at the stream's first position in the whole sequence.
  Tensor maybe_dropout(const Tensor& x, const DropoutBatch& batch, DropoutSite which, int layer);
  // One block, number `layer`: {x + attention, the MLP's output} [B,S,C] each.
  std::pair<Tensor, Tensor> block_forward(const BlockWeights& b, int layer, const DropoutBatch& batch, Tensor x,
                                          Tensor previous_mlp_out);
  void mark_grad_ready(const std::vector<int>& group);
  Tensor cross_entropy_of(const Tensor& logits, std::span<const int32_t> targets);
  void begin_use(int group);  // the group-use hooks around a span of ops, in forward and backward
  void end_use(int group);

  GPTConfig config_;
  GPTPart part_;
  ComputeModes modes_;
  GPTLayers layers_;  // each of the three set
  std::vector<NamedTensor> parameters_;
  Tensor wte_, wpe_, ln_f_weight_, ln_f_bias_;
  std::vector<BlockWeights> blocks_;  // the blocks it owns, in model order
  std::vector<int> block_ids_;        // their global numbers
  bool training_ = true;
  float loss_scale_ = 1.0f;
  RoutingStats routing_stats_;
  DropoutBatch dropout_batch_;
  GradReadyHook grad_ready_hook_;
  GroupUseHooks group_use_hooks_;
  std::vector<int> embedding_group_, ln_f_group_;  // indices into parameters_
  std::vector<std::vector<int>> block_groups_;
};

// Draws a token from softmax(logits) (already divided by the temperature), among the top_k
// largest only when top_k > 0. `logits` is used as scratch.
int32_t sample_token(std::span<float> logits, int top_k, Rng& rng);

}  // namespace nn
