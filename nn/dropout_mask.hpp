// A dropout mask that no layout changes. Element e of a mask is kept or dropped by a Philox
// draw (nn/philox.hpp) whose counter is where the element sits in the whole computation:
//
//   key     = the run's seed (its dropout stream: nn::stream_seed)
//   counter = (e / 8 within the sample's whole tensor, the sample's index in the step's global
//              batch, the site — which dropout of the model —, the optimizer step); e % 8 picks
//              one of the draw's eight 16-bit halves (four 32-bit words), which drops the
//              element when it is below round(p·2¹⁶); the kept ones are scaled by
//              2¹⁶/(2¹⁶ − round(p·2¹⁶)), 1/(1 − p) for the p the draws realise
//
// Nothing in it says how many ranks there are, which replica or micro-batch holds the sample,
// which stage runs the layer, or which slice of heads or positions this rank computes: a
// replica's micro-batch passes its first sample, a rank holding a slice passes where the slice
// starts in the whole (unsharded) per-sample tensor. So every layout draws the same masks, and
// a replay under recomputation draws forward's by construction.
#pragma once
#include <cstdint>

#include "nn/philox.hpp"

namespace nn {

struct DropoutMask {
  static constexpr int64_t kElementsPerDraw = 8;  // 16-bit halves of one Philox draw

  float p = 0.0f;             // the drop probability, in [0, 1)
  uint64_t seed = 0;          // the run's --seed
  int64_t step = 0;           // the optimizer step
  int64_t site = 0;           // which dropout of the model (nn/gpt.hpp: dropout_site)
  int64_t first_sample = 0;   // row 0 of the tensor is this sample of the step's global batch
  int64_t first_element = 0;  // each row is a slice of its sample's whole tensor, from here
  // A slice of two runs of the whole (context parallelism's two chunks of a sequence): the
  // row's elements from jump_at on lie `jump` elements further on in the whole. -1: one run.
  int64_t jump_at = -1;
  int64_t jump = 0;

  bool active() const { return p > 0.0f; }
  // The same mask for a tensor whose rows start `samples` later and whose slices start
  // `elements` further into each sample's whole tensor.
  DropoutMask shifted(int64_t samples, int64_t elements) const;
  // The factors of elements [first, first + n) of row `row`: 0 where dropped, 1/(1 − p) where
  // kept, p rounded to a multiple of 2⁻¹⁶ (first and n in the row's own numbering).
  void factors(int64_t row, int64_t first, int64_t n, float* out) const;

 private:
  void factors_of_run(int64_t row, int64_t first, int64_t n, float* out) const;  // one run: no jump inside
};

}  // namespace nn
