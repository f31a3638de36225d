// Embedding lookup: a table of vectors indexed by token id (or position).
#include <algorithm>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {

// forward:  out[n, :] = weight[ids[n], :]          weight [V,C] → out [N,C] (viewed ids_shape + [C])
// backward: dweight[ids[n], :] += dout[n, :]       (a row used twice gets both gradients)
Tensor embedding(const Tensor& weight, std::span<const int32_t> ids, const Shape& ids_shape) {
  if (weight.ndim() != 2) fail("embedding: weight must be 2-D, got {}", shape_string(weight.shape()));
  const int64_t V = weight.size(0), C = weight.size(1), N = static_cast<int64_t>(ids.size());
  if (numel_of(ids_shape) != N) fail("embedding: {} ids do not fill shape {}", N, shape_string(ids_shape));
  for (int32_t id : ids)
    if (id < 0 || id >= V) fail("embedding: id {} outside the table of {} rows", id, V);
  profile::Scope scope("embedding", 8.0 * N * C);  // read rows, write out
  Shape out_shape = ids_shape;
  out_shape.push_back(C);
  bool track = autograd::needs_grad({&weight});
  Tensor out = Tensor::empty(out_shape, track);
  const float* w = weight.data();
  float* od = out.data();
  for (int64_t n = 0; n < N; ++n) std::copy_n(w + static_cast<int64_t>(ids[n]) * C, C, od + n * C);

  if (track) {
    std::vector<int32_t> saved_ids(ids.begin(), ids.end());
    autograd::record([weight, out, saved_ids = std::move(saved_ids), N, C]() mutable {
      profile::Scope backward_scope("embedding", 12.0 * N * C);  // read dout and rows, write rows
      float* dw = weight.grad();
      const float* dout = out.grad();
      for (int64_t n = 0; n < N; ++n) {
        float* row = dw + static_cast<int64_t>(saved_ids[n]) * C;
        for (int64_t c = 0; c < C; ++c) row[c] += dout[n * C + c];
      }
    });
  }
  return out;
}

}  // namespace nn
