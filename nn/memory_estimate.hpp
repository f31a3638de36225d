// How much memory training a GPT will take, from its config alone — so an impossible
// configuration is refused in one line before anything is allocated, instead of dying of
// std::bad_alloc (or the kernel's OOM killer) minutes later.
//
//   parameters   P floats            (nanoGPT's count, wpe included)
//   gradients    P floats
//   AdamW        2P floats           (first and second moments)
//   gradient averaging  ≤ P floats   (the flat buckets of data parallelism)
//   activations  B·T·(L·(18C + 2·n_head·T) + 4C + 2V) floats, kept by the tape for backward:
//                per block ln_1, q/k/v, attention scores and probabilities (n_head·T per
//                token each), attention output, projection, residual, ln_2, 4C fc, 4C gelu,
//                projection, residual ≈ 18C; then ln_f, logits and their softmax
//   backward     as much again as the activations, at most (gradients of activations)
//
// It is an estimate (within a factor of ~1.5 of the measured peak): its job is to refuse
// what cannot fit, not to predict the last megabyte.
#pragma once
#include <cstdint>
#include <string>

#include "nn/gemm.hpp"  // Precision
#include "nn/gpt.hpp"
#include "nn/recompute.hpp"

namespace nn {

struct MemoryEstimate {
  double parameter_bytes = 0;   // parameters alone
  double state_bytes = 0;       // gradients + optimizer moments + averaging buffers
  double activation_bytes = 0;  // forward activations and their gradients, one micro-batch
  double total() const { return parameter_bytes + state_bytes + activation_bytes; }
  std::string describe() const;  // "2.1 GiB (parameters 512 MiB, gradients and optimizer 1.5 GiB, activations 96 MiB)"
};

// "1.5 GiB", "300 KiB".
std::string format_bytes(double bytes);

// Parameters as nanoGPT counts them, with the position embedding (lm_head is tied to wte);
// active_parameter_count: those one token uses (a mixture's k experts of E).
double parameter_count(const GPTConfig& config);
double active_parameter_count(const GPTConfig& config);
// What a mixture-of-experts block keeps beyond a dense block, floats per token (nn/moe_mlp.hpp;
// `ep` > 1: expert parallelism's dispatch copies too, parallel/ep/); and how many of the
// model's blocks are mixtures.
double moe_block_extra_floats_per_token(const GPTConfig& config, Precision precision, int ep = 1);
int moe_blocks(const GPTConfig& config);
// GPT::flops_per_token without building the model (for trainers that hold only a slice).
double flops_per_token(const GPTConfig& config, int64_t T);

// Context parallelism (`ranks` per sequence, each keeping T/ranks positions of every sequence):
// with ring attention (`ring_attention`) none of the attention weights (the n_head·T per token:
// it keeps a log-sum-exp per row), with Ulysses those of its heads over the whole T (the same
// per token, for 1/ranks of the tokens) and the two all-to-alls' copies.
struct ContextShape {
  int ranks = 1;
  bool ring_attention = false;
};

// What the tape keeps after one forward pass of a micro-batch of B sequences of T tokens, in
// one process (docs/memory.md derives it op by op), as floats per token:
//   per block  none       18C + n_head·T + 4 (+ 2C with dropout) (+ 5C of bf16 copies)
//              selective  18C + 4            (+ 2C with dropout) (+ 3.5C of bf16 copies)
//              full       C: the block's input
//   once       the embedding, ln_f and the loss: 3C + 2 + 2V + C/B (the position rows)
//              (+ C with dropout) (+ 0.5C bf16)
// plus, under bf16, the step's cast weights (2 bytes per matrix element). In bytes.
double kept_activation_bytes(const GPTConfig& config, int64_t B, int64_t T, Recompute recompute, Precision precision);
// One block's share of it on a rank of a tensor-parallel group of `tp` (with or without
// sequence parallelism), floats per token of the whole batch; tp = 1 is one process:
//   none       4C·[tp > 1] + 6C/s + 12C/tp + n_head·T/tp + 4/s (+ 2C/s with dropout)
//                (+ C + 4C/tp of bf16 copies)                 s = tp with SP, else 1
//   selective  the same without n_head·T/tp (and 1.5C/tp of the bf16 copies)
//   full       C/s
// Under context parallelism (per token of the rank's T/c positions; T the whole sequence):
//   ring       the attention weights n_head·T/tp become the log-sum-exp, n_head/tp
//   Ulysses    + 4C/tp: the all-to-all's input q|k|v and its heads' output, kept by the trades
double block_activation_floats_per_token(const GPTConfig& config, int64_t T, Recompute recompute,
                                         Precision precision, int tp = 1, bool sequence_parallel = false,
                                         ContextShape context = {});

// The parts outside the blocks, floats per token of a micro-batch of B sequences (a pipeline's
// first stage keeps the embedding's, its last the head's); s = tp under sequence parallelism,
// else 1: embedding (C + C/B (+ C with dropout))/s; head (2C + 2)/s + 2V/tp (+ C/2 under bf16).
double embedding_activation_floats_per_token(const GPTConfig& config, int64_t B, int sequence_shards = 1);
double head_activation_floats_per_token(const GPTConfig& config, Precision precision, int tp = 1, int sequence_shards = 1);
// Under bf16, the step's cast weights of `blocks` blocks (and the tied lm_head), 2 bytes per
// matrix element of a tensor-parallel slice of 1/tp (a mixture block's E/ep experts held); 0
// under fp32.
double weight_cast_bytes(const GPTConfig& config, Precision precision, int blocks, int tp = 1, bool with_head = true,
                         int mixture_blocks = 0, int ep = 1);

// `training`: gradients, optimizer and backward included; otherwise inference (evaluation).
// Under context parallelism a rank keeps T/context positions of each sequence.
MemoryEstimate estimate_memory(const GPTConfig& config, int64_t batch_size, bool training, ContextShape context = {});

}  // namespace nn
