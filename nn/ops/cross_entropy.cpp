// Softmax + cross-entropy fused: the forward pass already computes the gradient
// (softmax − one-hot) / n, so backward is one scaled add and no [N,V] softmax is stored twice.
#include <algorithm>
#include <cmath>
#include <limits>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {

// forward:  loss = (1/n) Σ_{rows r with target ≠ ignore} (log Σ_j exp(z_rj) − z_r,target)
//           n = number of such rows (PyTorch's F.cross_entropy(..., ignore_index=-1))
// backward: dz_rj += dloss · (softmax(z_r)_j − [j = target_r]) / n;  ignored rows get 0
Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets, int32_t ignore_index) {
  const int64_t V = logits.size(-1), N = logits.rows_of_last("cross_entropy");
  if (static_cast<int64_t>(targets.size()) != N)
    fail("cross_entropy: {} targets for {} rows of logits {}", targets.size(), N, shape_string(logits.shape()));
  int64_t counted = 0;
  for (int32_t t : targets) {
    if (t == ignore_index) continue;
    if (t < 0 || t >= V) fail("cross_entropy: target {} outside the {} classes", t, V);
    ++counted;
  }
  profile::Scope scope("softmax + cross-entropy", 8.0 * N * V);  // read logits, write dlogits
  bool track = autograd::needs_grad({&logits});
  Tensor loss = Tensor::empty({}, track);
  Tensor dlogits = Tensor::empty({N, V});  // d loss / d logits, filled now, used in backward
  const float* z = logits.data();
  float* g = dlogits.data();
  const float inv_n = counted ? 1.0f / static_cast<float>(counted) : 0.0f;
  double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (N * V > 32768)
  for (int64_t r = 0; r < N; ++r) {
    const float* zr = z + r * V;
    float* gr = g + r * V;
    if (targets[r] == ignore_index) {
      std::fill(gr, gr + V, 0.0f);
      continue;
    }
    float max = *std::max_element(zr, zr + V), sum = 0.0f;
    for (int64_t j = 0; j < V; ++j) sum += gr[j] = std::exp(zr[j] - max);
    total += std::log(sum) + max - zr[targets[r]];
    const float scale = inv_n / sum;
    for (int64_t j = 0; j < V; ++j) gr[j] *= scale;
    gr[targets[r]] -= inv_n;
  }
  loss.data()[0] = counted ? static_cast<float>(total / counted) : std::numeric_limits<float>::quiet_NaN();

  if (track) {
    autograd::record([logits, loss, dlogits, N, V]() mutable {
      profile::Scope backward_scope("softmax + cross-entropy", 8.0 * N * V);  // read dlogits, write the logits' gradient
      const float dloss = loss.grad()[0];
      const float* gv = dlogits.data();
      auto [dz, accumulate] = logits.grad_target();
      const int64_t total_n = N * V;
#pragma omp parallel for schedule(static) if (total_n > 65536)
      for (int64_t i = 0; i < total_n; ++i) dz[i] = (accumulate ? dz[i] : 0.0f) + dloss * gv[i];
    });
  }
  return loss;
}

}  // namespace nn
