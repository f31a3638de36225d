// Megatron-LM's activation memory, as Korthikanti et al. 2022 ("Reducing Activation
// Recomputation in Large Transformer Models", arXiv 2205.05198) count it: 16-bit activations,
// 1-byte dropout masks, s the sequence, b the micro-batch, h the width, a the heads, t the
// tensor-parallel degree, L the layers, p the pipeline stages, v the vocabulary.
//
// One layer (Table 2), bytes:
//   no parallelism                      sbh(34 + 5as/h)
//   tensor parallel                     sbh(10 + 24/t + 5as/(ht))
//   tensor + sequence parallel          sbh(34/t + 5as/(ht))
//   tensor parallel + selective         sbh(10 + 24/t)
//   tensor + sequence + selective       sbh(34/t)
//   full recompute                      2sbh         (the layer's input)
// The first pipeline stage holds p micro-batches in flight with 1F1B: L/p layers × p = L
// layers' worth (Eq. 5), × (1 + (p−1)/(p·m)) with m interleaved chunks; plus the embedding's
// dropout mask sbhp/t, and with p = 1 the output layer's 4sbh/t (ln_f and its output) and
// fp32 logits 4sbv/t.
#pragma once
#include <cstdint>

#include "nn/gpt.hpp"
#include "nn/recompute.hpp"

namespace planning {

double megatron_layer_activation_bytes(const nn::GPTConfig& model, double micro_batch, int tp, bool sequence_parallel,
                                       nn::Recompute recompute);
// What the first stage keeps at its peak under 1F1B with at least p micro-batches (Eq. 5 and
// its forms), bytes: the paper's own count.
double megatron_first_stage_activation_bytes(const nn::GPTConfig& model, double micro_batch, int tp, int pp,
                                             int virtual_stages, bool sequence_parallel, nn::Recompute recompute);
// Any stage under any schedule: its chunks' layers (L/(p·v) each) × the chunk micro-batches in
// flight, the embedding's mask × the micro-batches in flight on the first stage, the output
// layer's with p = 1. Equals the first-stage count where Eq. 5 holds (a test).
double megatron_stage_activation_bytes(const nn::GPTConfig& model, double micro_batch, int tp, int pp,
                                       int virtual_stages, bool sequence_parallel, nn::Recompute recompute, int stage,
                                       int64_t chunks_in_flight, int64_t micro_batches_in_flight);

}  // namespace planning
