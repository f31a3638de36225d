#include "planning/megatron_activations.hpp"

namespace planning {

double megatron_layer_activation_bytes(const nn::GPTConfig& c, double b, int tp, bool sp, nn::Recompute recompute) {
  const double s = c.block_size, h = c.n_embd, a = c.n_head, t = tp, sbh = s * b * h;
  if (recompute == nn::Recompute::full) return 2 * sbh;
  const double attention = recompute == nn::Recompute::selective ? 0 : 5 * a * s / (h * t);  // scores, softmax, dropout
  const double rest = sp ? 34 / t : 10 + 24 / t;  // SP shards the 10 that TP leaves whole
  return sbh * (rest + attention);
}

double megatron_first_stage_activation_bytes(const nn::GPTConfig& c, double b, int tp, int pp, int v, bool sp,
                                             nn::Recompute recompute) {
  const double s = c.block_size, h = c.n_embd, t = tp, p = pp, L = c.n_layer, sbh = s * b * h;
  const double interleaving = v > 1 ? 1 + (p - 1) / (p * v) : 1.0;
  const double layers = L * megatron_layer_activation_bytes(c, b, tp, sp, recompute) * interleaving;
  double extra = sbh * p / t;                                            // the embedding's dropout mask
  if (pp == 1) extra += 4 * sbh / t + 4 * s * b * c.vocab_size / t;      // ln_f, lm_head's input; fp32 logits
  return layers + extra;
}

double megatron_stage_activation_bytes(const nn::GPTConfig& c, double b, int tp, int pp, int v, bool sp,
                                       nn::Recompute recompute, int stage, int64_t chunks_in_flight,
                                       int64_t micro_batches_in_flight) {
  const double s = c.block_size, h = c.n_embd, t = tp, sbh = s * b * h;
  const double chunk_layers = static_cast<double>(c.n_layer) / (static_cast<double>(pp) * v);
  double bytes = megatron_layer_activation_bytes(c, b, tp, sp, recompute) * chunk_layers *
                 static_cast<double>(chunks_in_flight);
  if (stage == 0) bytes += sbh / t * static_cast<double>(micro_batches_in_flight);  // the embedding's dropout mask
  if (pp == 1) bytes += 4 * sbh / t + 4 * s * b * c.vocab_size / t;                  // ln_f, lm_head's input; fp32 logits
  return bytes;
}

}  // namespace planning
