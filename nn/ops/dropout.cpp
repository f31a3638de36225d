// Dropout: during training, zero each element with probability p and scale the survivors by
// 1/(1−p) so the expected value is unchanged (p as the mask's draws realise it: a multiple of 2⁻¹⁶). Which elements: nn/dropout_mask.hpp — a function
// of where each element sits in the whole computation, recomputed in backward (nothing kept).
#include <algorithm>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {
namespace {

constexpr int64_t kMaskChunk = 1024;  // elements whose factors one task draws at a time (4 KiB)

// f(i, factors, n) for every chunk of each row of x viewed as [rows, per_row], where
// factors[0, n) belong to elements i … i + n − 1 of the flat tensor.
template <class F>
void for_mask_chunks(const DropoutMask& mask, int64_t rows, int64_t per_row, F f) {
  const int64_t chunks_per_row = (per_row + kMaskChunk - 1) / kMaskChunk;
#pragma omp parallel for schedule(static) if (rows * per_row > 32768)
  for (int64_t c = 0; c < rows * chunks_per_row; ++c) {
    float factors[kMaskChunk];
    const int64_t row = c / chunks_per_row, first = c % chunks_per_row * kMaskChunk;
    const int64_t n = std::min(kMaskChunk, per_row - first);
    mask.factors(row, first, n, factors);
    f(row * per_row + first, factors, n);
  }
}

}  // namespace

// x [rows, …]: row b is sample mask.first_sample + b, its elements the slice of that sample's
// whole tensor from mask.first_element.
// forward:  y_i = x_i · m_i / (1 − p),   m_i = 1 with probability 1 − p
// backward: dx_i += dy_i · m_i / (1 − p)
Tensor dropout(const Tensor& x, const DropoutMask& mask) {
  if (mask.p < 0.0f || mask.p >= 1.0f) fail("dropout: p must be in [0, 1), got {}", mask.p);
  if (mask.p == 0.0f) return x;
  if (x.ndim() == 0 || x.numel() == 0) fail("dropout: needs a tensor with rows, got {}", shape_string(x.shape()));
  const int64_t n = x.numel(), rows = x.size(0), per_row = n / rows;
  profile::Scope scope("dropout", 8.0 * n);  // read x, write y
  bool track = autograd::needs_grad({&x});
  Tensor y = Tensor::empty(x.shape(), track);
  const float* xd = x.data();
  float* yd = y.data();
  for_mask_chunks(mask, rows, per_row, [xd, yd](int64_t i, const float* factors, int64_t count) {
    for (int64_t k = 0; k < count; ++k) yd[i + k] = xd[i + k] * factors[k];
  });
  if (track) {
    autograd::record([x, y, n, rows, per_row, mask]() mutable {
      profile::Scope backward_scope("dropout", 12.0 * n);  // read dy, dx; write dx
      float* dx = x.grad();
      const float* dy = y.grad();
      for_mask_chunks(mask, rows, per_row, [dx, dy](int64_t i, const float* factors, int64_t count) {
        for (int64_t k = 0; k < count; ++k) dx[i + k] += dy[i + k] * factors[k];
      });
    });
  }
  return y;
}

}  // namespace nn
