// --precision: the element type the model's matrix multiplies run in, as torch.autocast.
//
//   fp32  everything in fp32
//   bf16  the linear layers take bf16 inputs (activations, weights, and in backward the
//         incoming gradient) and return fp32: products are exact in fp32 and sums accumulate
//         in fp32; so do attention's QKᵀ and PV (nn/ops/attention.cpp). Master weights,
//         gradients, AdamW's state, layernorm, softmax, GELU, the loss and the residual
//         stream stay fp32.
//
// A weight is cast to bf16 once per optimizer step, not once per micro-batch: while a
// WeightCastCache lives (the training loop makes one per step, as autocast's cache lives
// for its context), casts of the same parameter are kept and reused.
#pragma once
#include <cstdint>
#include <memory>

#include "nn/gemm.hpp"  // Precision
#include "numeric/bf16.hpp"
#include "nn/tensor.hpp"

namespace nn {

// Which precision a product runs in is the caller's (linear, matmul and attention take it; the
// models pass their ComputeModes', nn/compute_modes.hpp): nothing here is process-wide but the
// cast cache of a step.

// n bf16 values in memory from the buffer pool (nn/buffer_pool.hpp): no page faults once warm.
class Bf16Buffer {
 public:
  explicit Bf16Buffer(int64_t n);
  ~Bf16Buffer();
  Bf16Buffer(const Bf16Buffer&) = delete;
  Bf16Buffer& operator=(const Bf16Buffer&) = delete;
  numeric::bfloat16* data() const { return values_; }

 private:
  numeric::bfloat16* values_;
  std::size_t count_;
};
// Shared, so a backward closure keeps the cast its forward made (as autocast saves it).
using Bf16Values = std::shared_ptr<const Bf16Buffer>;

Bf16Values cast_to_bf16(const float* values, int64_t n);  // a fresh cast: activations, gradients
Bf16Values cast_weight_to_bf16(const Tensor& weight);     // kept while a WeightCastCache lives

// One optimizer step's scope: the weights do not change inside it. Nested scopes share the
// outermost one's cache; it is emptied when that one ends.
class WeightCastCache {
 public:
  WeightCastCache();
  ~WeightCastCache();
  WeightCastCache(const WeightCastCache&) = delete;
  WeightCastCache& operator=(const WeightCastCache&) = delete;
  static std::size_t casts_made();  // weight casts since the process began (for the tests)
};

}  // namespace nn
