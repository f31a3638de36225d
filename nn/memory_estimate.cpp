#include "nn/memory_estimate.hpp"

#include <fmt/format.h>

namespace nn {

namespace {
// A mixture block's count: the router's E·C and E experts' MLPs in place of one MLP.
double blocks_parameter_count(const GPTConfig& c, double experts_used) {
  const double C = c.n_embd, L = c.n_layer, bias = c.bias ? 1.0 : 0.0;
  const double mlp = 8 * C * C + bias * (4 * C + C);
  const double per_block = 4 * C * C + 2 * C /* layernorms */ + bias * (2 * C + 3 * C + C) + mlp;
  const double moe_blocks = c.n_experts > 0 ? c.n_layer / c.moe_every : 0;
  return L * per_block + moe_blocks * (c.n_experts * C + (experts_used - 1) * mlp);
}
}  // namespace

double parameter_count(const GPTConfig& c) {
  const double C = c.n_embd, bias = c.bias ? 1.0 : 0.0;
  return static_cast<double>(c.vocab_size) * C + c.block_size * C + blocks_parameter_count(c, c.n_experts) +
         C * (1 + bias);
}

double active_parameter_count(const GPTConfig& c) {
  return parameter_count(c) - (blocks_parameter_count(c, c.n_experts) - blocks_parameter_count(c, c.experts_per_token));
}

double moe_block_extra_floats_per_token(const GPTConfig& c, Precision precision, int ep) {
  // In place of the MLP's fc 4C, gelu 4C and output C: the router's logits and probabilities
  // 2E; for each of a token's k choices its gathered row C, fc 4C, gelu 4C and expert output
  // C; the combined output and attach_loss's copy 2C (an upper bound: dropped choices keep
  // nothing). Under bf16 each choice's two input copies (C + 4C)/2, the dense MLP's once.
  // Expert parallelism moves each choice's row through five more copies, C each: the rows in
  // expert order, as received, the outputs in their places, as returned, and each expert's
  // share of them (the experts' rows counted at the rank's own k per token: balanced routing).
  const double C = c.n_embd, E = c.n_experts, k = c.experts_per_token;
  const double bf16 = precision == Precision::bf16 ? 1.0 : 0.0;
  const double dispatch = ep > 1 ? 5 * k * C : 0.0;
  return 2 * E + 10 * k * C + 2 * C - 9 * C + bf16 * (k - 1) * 2.5 * C + dispatch;
}

int moe_blocks(const GPTConfig& c) { return c.n_experts > 0 ? c.n_layer / c.moe_every : 0; }

MemoryEstimate estimate_memory(const GPTConfig& c, int64_t batch_size, bool training, ContextShape context) {
  constexpr double kFloat = 4;
  const double P = parameter_count(c), B = static_cast<double>(batch_size), T = c.block_size, C = c.n_embd;
  const bool sharded = training && context.ranks > 1;  // (evaluation runs the whole sequence on every rank)
  const double attention = sharded && context.ring_attention ? 0.0 : 2.0 * c.n_head * T;
  const double per_token = c.n_layer * (18 * C + attention) + 4 * C + 2.0 * c.vocab_size +
                           moe_blocks(c) * moe_block_extra_floats_per_token(c, Precision::fp32);
  const double tokens = B * T / (sharded ? context.ranks : 1);
  MemoryEstimate e;
  e.parameter_bytes = kFloat * P;
  e.state_bytes = training ? kFloat * 4 * P : 0;
  e.activation_bytes = kFloat * tokens * per_token * (training ? 2 : 1);
  return e;
}

double block_activation_floats_per_token(const GPTConfig& c, int64_t T, Recompute recompute, Precision precision,
                                         int tp, bool sequence_parallel, ContextShape context) {
  const double C = c.n_embd, H = c.n_head, t = tp, r = sequence_parallel ? tp : 1;  // r divides the replicated
  const double dropout = c.dropout > 0.0f ? 1.0 : 0.0, bf16 = precision == Precision::bf16 ? 1.0 : 0.0;
  if (recompute == Recompute::full) return C / r;  // the block's input
  // Every op's output is kept (its closure holds it, for the gradient it carries). Replicated
  // (or a sequence shard, /r): the input, ln_1, the residual after attention, ln_2 and the two
  // sublayer outputs = 6C; each layernorm's (μ, σ⁻¹) 2+2; the two dropouts' outputs 2C.
  // Split by heads or columns (/t): qkv 3C, attention out C, fc 4C, gelu 4C = 12C; the
  // attention weights n_head·T. Whole on every tp rank (t > 1): the two linears' inputs (f's
  // copy, or SP's gathered [B,T,C]) and the two row-parallel partial sums = 4C.
  // Under bf16 the linears' input copies (C + C/t + C + 4C/t)/2 and attention's qkv copy 3C/(2t).
  const double attention_weights = recompute == Recompute::selective ? 0 : H * static_cast<double>(T) / t;
  const double qkv_copy = recompute == Recompute::selective ? 0 : 1.5 * C / t;
  // Context parallelism: the ring keeps a log-sum-exp per row and head instead of the weights;
  // Ulysses' two trades keep their inputs' q|k|v (3C) and their heads' output (C).
  const bool ring = context.ranks > 1 && context.ring_attention, ulysses = context.ranks > 1 && !ring;
  // (Under selective recompute the whole attention core, ring or trades included, is replayed: none kept.)
  const double attention = recompute == Recompute::selective ? 0
                           : ring                            ? H / t
                                                             : attention_weights + (ulysses ? 4 * C / t : 0);
  return (tp > 1 ? 4 * C : 0) + 6 * C / r + 12 * C / t + attention + 4 / r + 2 * C * dropout / r +
         bf16 * (C + 2.5 * C / t + qkv_copy);
}

double embedding_activation_floats_per_token(const GPTConfig& c, int64_t B, int sequence_shards) {
  // The token embedding C; the position rows [T,C] are one per sequence, C/B per token; with
  // dropout the embedding sum C (kept by dropout). Sequence parallelism keeps 1/s of each.
  const double C = c.n_embd, dropout = c.dropout > 0.0f ? 1.0 : 0.0;
  return (C + C / static_cast<double>(B) + C * dropout) / sequence_shards;
}

double head_activation_floats_per_token(const GPTConfig& c, Precision precision, int tp, int sequence_shards) {
  // The last block's output C, ln_f's C and (μ, σ⁻¹) 2 (1/s of each under sequence
  // parallelism); logits V and the loss's gradient V kept from forward (vocab-parallel: V/t
  // each); lm_head's input copy C/2 under bf16.
  const double C = c.n_embd, V = c.vocab_size, bf16 = precision == Precision::bf16 ? 1.0 : 0.0;
  return (2 * C + 2) / sequence_shards + 2 * V / tp + 0.5 * C * bf16;
}

double weight_cast_bytes(const GPTConfig& c, Precision precision, int blocks, int tp, bool with_head,
                         int mixture_blocks, int ep) {
  if (precision != Precision::bf16) return 0;
  const double C = c.n_embd, V = c.vocab_size;
  // 2 bytes per matrix element; a mixture block's E experts (each cast when it has tokens; the
  // router stays fp32) in place of one MLP.
  const double experts = mixture_blocks * (c.n_experts / ep - 1) * 8 * C * C;
  return 2 * (12 * C * C * blocks + experts + (with_head ? V * C : 0)) / tp;
}

double kept_activation_bytes(const GPTConfig& c, int64_t B, int64_t T, Recompute recompute, Precision precision) {
  const double L = c.n_layer, tokens = static_cast<double>(B * T);
  const double per_block = block_activation_floats_per_token(c, T, recompute, precision, 1, false);
  const double once = embedding_activation_floats_per_token(c, B) + head_activation_floats_per_token(c, precision, 1);
  const double moe = recompute == Recompute::full ? 0 : moe_blocks(c) * moe_block_extra_floats_per_token(c, precision);
  return 4 * tokens * (L * per_block + moe + once) +
         weight_cast_bytes(c, precision, c.n_layer, 1, true, moe_blocks(c));
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) bytes /= 1024, ++u;
  return fmt::format("{:.3g} {}", bytes, units[u]);
}

std::string MemoryEstimate::describe() const {
  return fmt::format("{} (parameters {}, gradients and optimizer {}, activations {})", format_bytes(total()),
                     format_bytes(parameter_bytes), format_bytes(state_bytes), format_bytes(activation_bytes));
}

double flops_per_token(const GPTConfig& config, int64_t T) {
  // As GPT::flops_per_token: 6 per non-embedding parameter a token uses (without wpe) plus
  // attention's q·k and p·v.
  return 6.0 * (active_parameter_count(config) - static_cast<double>(config.block_size) * config.n_embd) +
         12.0 * config.n_layer * config.n_embd * static_cast<double>(T);
}

}  // namespace nn
