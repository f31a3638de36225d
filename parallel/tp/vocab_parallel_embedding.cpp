#include "parallel/tp/vocab_parallel_embedding.hpp"

#include <algorithm>
#include <vector>

#include "nn/autograd.hpp"
#include "parallel/tp/conjugate_ops.hpp"

namespace parallel {

// forward:  partial[i] = wte_rows[ids[i] − start] if this rank owns ids[i], else 0
// backward: d wte_rows[ids[i] − start] += dpartial[i] for the owned ids
nn::Tensor vocab_parallel_lookup(const nn::Tensor& wte_rows, int64_t vocab_start, std::span<const int32_t> ids,
                                 const nn::Shape& ids_shape) {
  const int64_t Vr = wte_rows.size(0), C = wte_rows.size(1), n = static_cast<int64_t>(ids.size());
  nn::Shape shape = ids_shape;
  shape.push_back(C);
  const bool track = nn::autograd::needs_grad({&wte_rows});
  nn::Tensor partial = nn::Tensor::zeros(shape, track);
  std::vector<int64_t> owned(static_cast<std::size_t>(n), -1);  // the local row of each id, or -1
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = ids[i] - vocab_start;
    if (local < 0 || local >= Vr) continue;
    owned[i] = local;
    std::copy_n(wte_rows.data() + local * C, C, partial.data() + i * C);
  }
  if (track) {
    nn::autograd::record([wte_rows, partial, owned, C]() {
      const float* dx = partial.grad();
      float* dw = wte_rows.grad();  // accumulates: rows are hit many times
      for (std::size_t i = 0; i < owned.size(); ++i)
        if (owned[i] >= 0)
          for (int64_t c = 0; c < C; ++c) dw[owned[i] * C + c] += dx[static_cast<int64_t>(i) * C + c];
    });
  }
  return partial;
}

// x = g(partial): exactly one rank contributed each row.
nn::Tensor vocab_parallel_embedding(const nn::Tensor& wte_rows, int64_t vocab_start, std::span<const int32_t> ids,
                                    const nn::Shape& ids_shape, comm::Communicator& tp) {
  return reduce_from_tensor_parallel(vocab_parallel_lookup(wte_rows, vocab_start, ids, ids_shape), tp);
}

}  // namespace parallel
