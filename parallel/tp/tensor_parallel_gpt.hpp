// nanoGPT's GPT with tensor parallelism: nn::GPT itself, its linears, embedding and loss
// substituted by the tensor-parallel layers (parallel/tp/tensor_parallel_layers.hpp) — the
// block, attention and MLP are nn/gpt.cpp's. What this class adds is only tensor
// parallelism's own: which slice each parameter is, gathering and cutting whole tensors, and
// finishing the gradients over the group.
//
//   nn::GPT block, written once          column/row layers substituted here
//   ─────────────────────────────        ───────────────────────────────────
//   ln_1 ─ c_attn ─ attention ─ c_proj   c_attn: column (heads/W), c_proj: row
//   ln_2 ─ c_fc ─ GELU ─ mlp.c_proj      c_fc: column (4C/W),      mlp.c_proj: row
//   (layernorms, dropout, residual adds, fusion, recompute, bf16: the same code)
//
// Initialisation: the whole model (or the stage's part of it) is drawn from the seed as one
// process draws it and this rank keeps its slices, so any W starts from exactly the W = 1
// model. Dropout masks are those of the one-process model (nn/dropout_mask.hpp): on the
// residual stream every rank draws the same mask, inside attention each rank the part of its
// heads, on a sequence-parallel shard the part of its positions — each slice placed in the
// whole tensor, so no W changes them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/gpt.hpp"
#include "parallel/tp/tensor_parallel_layers.hpp"

namespace parallel {

class TensorParallelGPT final : public nn::GPT {
 public:
  // The whole model, or a pipeline stage's `part` of it (train_3d). With sequence_parallel,
  // training activations outside the tensor-parallel regions are [B, T/tp, C]
  // (parallel/tp/sequence_parallel_ops.hpp); evaluation and generation keep them whole (no
  // backward to save memory for, and any length T).
  TensorParallelGPT(const nn::GPTConfig& config, uint64_t seed, comm::Communicator& tp, bool sequence_parallel = false,
                    std::optional<nn::GPTPart> part = std::nullopt, const nn::ComputeModes& modes = {});

  int64_t padded_vocab() const { return layers_->padded_vocab(); }
  bool sequence_parallel() const { return layers_->sequence_parallel(); }

  // Every parameter this rank holds (parameters()' order) with how it is cut.
  const std::vector<TpParameter>& slices() const { return layers_->kept(); }
  // This rank's part of a whole tensor laid out like parameter `p` (values or a gradient).
  std::vector<float> shard_of(const TpParameter& p, std::span<const float> whole) const {
    return layers_->shard_of(p, whole);
  }
  // The whole parameter from every rank's part (an all-gather over the group).
  std::vector<float> gather(const TpParameter& p, std::span<const float> mine) const {
    return layers_->gather(p, mine);
  }
  // This rank's wte rows (the embedding's, or the head's copy on a last stage); undefined when
  // the part has neither.
  nn::Tensor tied_embedding();

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

 private:
  TensorParallelGPT(std::shared_ptr<TensorParallelLayers> layers, const nn::GPTConfig& config, uint64_t seed,
                    std::optional<nn::GPTPart> part, const nn::ComputeModes& modes);
  std::shared_ptr<TensorParallelLayers> layers_;  // the model's own, seen as what they are
};

}  // namespace parallel
