#include "parallel/tp/vocab_parallel_cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nn/autograd.hpp"
#include "nn/error.hpp"

namespace parallel {
namespace {

// The rows that count (target ≠ ignore_index); fails on a target outside the vocabulary.
int64_t counted_rows(std::span<const int32_t> targets, int64_t vocab_size, int32_t ignore_index) {
  int64_t counted = 0;
  for (int32_t t : targets) {
    if (t == ignore_index) continue;
    if (t < 0 || t >= vocab_size)
      nn::fail("vocab_parallel_cross_entropy: target {} outside the {} classes", t, vocab_size);
    ++counted;
  }
  return counted;
}

// Each row's max over every rank's `real` columns of z [N, Vr].
std::vector<float> row_maxima(const float* z, int64_t N, int64_t Vr, int64_t real, comm::Communicator& tp) {
  std::vector<float> max(static_cast<std::size_t>(N), -std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < N; ++r)
    if (real > 0) max[r] = *std::max_element(z + r * Vr, z + r * Vr + real);
  tp.allreduce(std::span(max), comm::ReduceOp::max);
  return max;
}

// Each row's target logit: the rank whose columns hold it contributes it, the others 0.
std::vector<float> target_logits(const float* z, int64_t N, int64_t Vr, int64_t real, std::span<const int32_t> targets,
                                 int64_t vocab_start, int32_t ignore_index, comm::Communicator& tp) {
  std::vector<float> target_logit(static_cast<std::size_t>(N), 0.0f);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t local = static_cast<int64_t>(targets[r]) - vocab_start;
    if (targets[r] != ignore_index && local >= 0 && local < real) target_logit[r] = z[r * Vr + local];
  }
  tp.allreduce(std::span(target_logit));
  return target_logit;
}

}  // namespace

// forward:  M_r = max over all ranks' real columns of z_rj;  S_r = Σ_all exp(z_rj − M_r)
//           loss = (1/n) Σ_{counted rows} (log S_r + M_r − z_r,target)
// backward: dz_rj += dloss · (exp(z_rj − M_r) / S_r − [j = target_r]) / n   (this rank's j only)
nn::Tensor vocab_parallel_cross_entropy(const nn::Tensor& local_logits, std::span<const int32_t> targets,
                                        int64_t vocab_start, int64_t vocab_size, comm::Communicator& tp,
                                        int32_t ignore_index) {
  const int64_t Vr = local_logits.size(-1), N = local_logits.rows_of_last("vocab_parallel_cross_entropy");
  if (static_cast<int64_t>(targets.size()) != N)
    nn::fail("vocab_parallel_cross_entropy: {} targets for {} rows of logits {}", targets.size(), N,
             nn::shape_string(local_logits.shape()));
  const int64_t real = std::clamp<int64_t>(vocab_size - vocab_start, 0, Vr);  // this rank's non-padding columns
  const int64_t counted = counted_rows(targets, vocab_size, ignore_index);
  const float* z = local_logits.data();
  // 1. Row maxima over every rank's real columns; 2. the target's logit.
  const std::vector<float> max = row_maxima(z, N, Vr, real, tp);
  const std::vector<float> target_logit = target_logits(z, N, Vr, real, targets, vocab_start, ignore_index, tp);

  // 3. Sums of exp(z − max); the exponentials are kept for the backward.
  nn::Tensor probabilities = nn::Tensor::zeros({N, Vr});  // exp(z − M), then divided by S
  float* p = probabilities.data();
  std::vector<float> sum(static_cast<std::size_t>(N), 0.0f);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < real; ++j) sum[r] += p[r * Vr + j] = std::exp(z[r * Vr + j] - max[r]);
  tp.allreduce(std::span(sum));

  double total = 0.0;
  for (int64_t r = 0; r < N; ++r) {
    if (targets[r] == ignore_index) continue;
    total += std::log(sum[r]) + max[r] - target_logit[r];
  }
  const bool track = nn::autograd::needs_grad({&local_logits});
  nn::Tensor loss = nn::Tensor::empty({}, track);
  loss.data()[0] = counted ? static_cast<float>(total / counted) : std::numeric_limits<float>::quiet_NaN();
  if (!track) return loss;

  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < real; ++j) p[r * Vr + j] /= sum[r];
  const float inv_n = counted ? 1.0f / static_cast<float>(counted) : 0.0f;
  std::vector<int32_t> owned(targets.begin(), targets.end());
  nn::autograd::record([local_logits, loss, probabilities, owned, vocab_start, real, inv_n, ignore_index, N, Vr]() {
    const float dloss = loss.grad()[0] * inv_n;
    const float* prob = probabilities.data();
    auto [dz, accumulate] = local_logits.grad_target();
    for (int64_t r = 0; r < N; ++r) {
      const bool counted_row = owned[r] != ignore_index;
      const int64_t local = static_cast<int64_t>(owned[r]) - vocab_start;
      for (int64_t j = 0; j < Vr; ++j) {
        float g = counted_row && j < real ? dloss * (prob[r * Vr + j] - (j == local ? 1.0f : 0.0f)) : 0.0f;
        dz[r * Vr + j] = (accumulate ? dz[r * Vr + j] : 0.0f) + g;
      }
    }
  });
  return loss;
}

}  // namespace parallel
