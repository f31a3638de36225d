// A mixture of experts in place of a block's MLP (GShard, Lepikhin et al. 2020; Switch, Fedus
// et al. 2021; Mixtral's top-k): a router scores each token against E experts, each token goes
// to its k best, and the experts — each shaped as the GPT's MLP — compute only the tokens sent
// to them. Parameters per token stay those of k experts while the model holds E.
//
//   h [B,T,C] ─ router (C→E, fp32) ─ softmax ─ probs [B,T,E]
//            ─ route_tokens: each token's k most probable experts (ties: the lower index),
//              at most capacity = ⌈f·k·T/E⌉ tokens of one sequence per expert (T: the model's
//              block_size); slots are taken position by position, each token's choices in rank
//              order; a choice over capacity is dropped (the residual carries the token past)
//            ─ expert e on its rows: c_proj(gelu(c_fc(h_rows)))
//            ─ combine: y[t] = Σ over t's kept choices of probs[t,e] · expert_e(h[t])   [B,T,C]
//
// The gate is the router's probability itself, not renormalised over the k: with k = 1 a
// renormalised gate would be 1 and the router would learn nothing from the loss (Switch).
// The group that capacity and the balancing loss count over is one sequence, never "the
// tokens this rank holds": which tokens are dropped does not depend on how a batch is split.
// And a token's fate depends on the tokens before it only: position t's output stays a
// function of positions ≤ t, as causal attention's is (filling every first choice before any
// second one, as GShard does, would let a later token's first choice drop an earlier token's
// second — the future leaking into the past); capacity counts the block_size, not the length
// at hand, so generating from a short prompt drops what training would have.
// Switch's load-balancing loss per sequence, E·Σ_e f_e·P_e (f_e: the share of the k·T
// choices naming e, P_e: e's mean probability; 1 when balanced, E when one expert takes all),
// averaged over sequences, joins the training loss with weight aux_loss_weight through
// attach_loss (nn/ops.hpp): its gradient flows in backward on whichever stage holds the block.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "nn/gemm.hpp"  // Precision
#include "nn/gpt_layers.hpp"
#include "nn/mlp.hpp"
#include "nn/tensor.hpp"

namespace nn {

struct MoESettings {
  int n_experts = 0;          // E
  int experts_per_token = 1;  // k
  double capacity_factor = 1.25;  // f
  float aux_loss_weight = 0.01f;
  int64_t sequence_length = 1;  // T of the capacity: the model's block_size
};

// One expert's tensors (transformer.h.<l>.mlp.experts.<i>.c_fc.weight, …): the block's MLP
// (nn/mlp.hpp); undefined for an expert held by another rank (expert parallelism).
using ExpertWeights = MLPWeights;
struct MoEWeights {
  Tensor router_weight;  // [E,C] (transformer.h.<l>.mlp.router.weight), no bias
  std::vector<ExpertWeights> experts;
};

// ⌈f·k·T/E⌉, at most T: how many of one sequence's T tokens an expert takes.
int64_t expert_capacity(int64_t T, int n_experts, int experts_per_token, double capacity_factor);

// Where the tokens of G sequences of T go, from the router's probabilities [G,T,E].
struct Routing {
  std::vector<std::vector<int32_t>> rows;  // per expert: the token rows (g·T + t) it computes, in slot order
  std::vector<std::vector<int64_t>> gate;  // per expert: each row's gate as a flat index (g·T + t)·E + e into probs
  std::vector<float> shares;               // [G·E]: the share of sequence g's k·T choices that named e
  int64_t dropped = 0;                     // choices over capacity
};
Routing route_tokens(std::span<const float> probs, int64_t G, int64_t T, const MoESettings& settings);

// The same, when the T positions held here are `runs` runs of T/runs positions of each sequence
// (context parallelism: two, from both ends) and the rest of each sequence lies elsewhere: the
// capacity still counts the whole sequence position by position, so each run starts from what
// the sequence's earlier positions chose. `count` ([G,runs,E] this rank's runs' choices per
// expert → before [G,runs,E], the choices of every position before each run, and whole [G,E],
// the whole sequence's: SequenceLayout::count_choices) fills them in.
using CountChoices = std::function<void(std::span<const int64_t> mine, std::span<int64_t> before,
                                        std::span<int64_t> whole)>;
Routing route_tokens(std::span<const float> probs, int64_t G, int64_t T, const MoESettings& settings, int runs,
                     const CountChoices& count);

// What the routing did, summed over a run of forwards (the training log's columns).
struct RoutingStats {
  std::map<int, std::vector<int64_t>> tokens_per_expert;  // block number → kept choices per expert
  int64_t choices = 0, dropped = 0;        // choices made (k per token and block), and dropped
  double aux_loss = 0.0;                   // Σ of the blocks' load-balancing losses …
  int64_t aux_terms = 0;                   // … and how many were summed
  double dispatch_seconds = 0.0;           // in expert parallelism's exchanges, forward and backward (parallel/ep/)
  void clear() { *this = RoutingStats{}; }
};

// The mixture on h [B,T,C] → [B,T,C], in four steps: the router's probabilities, the routing,
// the dispatcher running each expert (the block's MLP, nn/mlp.hpp) on its rows — here, or over
// the expert-parallel group (TokenDispatcher::run_experts) — and the combine. The balancing
// loss is attached with weight aux_loss_weight · loss_scale (loss_scale: what the training loss
// is multiplied by before backward, 1/micro-batches when they are averaged). `stats` (may be
// null) gains this call's, under block number `layer`.
// `sequence`: where h's positions lie in their sequences (SequenceLayout::stream_place: one run,
// or context parallelism's two) and the count of the choices made elsewhere (count_choices).
Tensor moe_mlp(const Tensor& h, const MoEWeights& weights, const MoESettings& settings, Precision precision,
               bool fused_bias_gelu, float loss_scale, RoutingStats* stats, int layer, TokenDispatcher& dispatcher,
               SequenceLayout& sequence, bool training);

}  // namespace nn
