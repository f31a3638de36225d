#include "nn/dropout_mask.hpp"

#include <algorithm>
#include <cmath>

#include "nn/error.hpp"
#include "nn/rng.hpp"

namespace nn {

DropoutMask DropoutMask::shifted(int64_t samples, int64_t elements) const {
  DropoutMask m = *this;
  m.first_sample += samples;
  m.first_element += elements;
  return m;
}

// Each Philox draw gives four 32-bit words, each word two 16-bit halves: eight elements per
// draw (half the draws of one element per word; p is then kept to within 2⁻¹⁷).
void DropoutMask::factors(int64_t row, int64_t first, int64_t n, float* out) const {
  if (jump_at < 0 || first + n <= jump_at) return factors_of_run(row, first, n, out);
  if (first >= jump_at) return factors_of_run(row, first + jump, n, out);
  factors_of_run(row, first, jump_at - first, out);  // the first run's part, then the second's
  factors_of_run(row, jump_at + jump, first + n - jump_at, out + (jump_at - first));
}

void DropoutMask::factors_of_run(int64_t row, int64_t first, int64_t n, float* out) const {
  // A half below round(p·2¹⁶) drops the element: with probability p' = threshold/2¹⁶, so the
  // survivors are scaled by 1/(1 − p') and the expected value stays exactly the input's.
  const auto threshold = static_cast<uint32_t>(std::lround(std::ldexp(static_cast<double>(p), 16)));
  const float kept_scale = static_cast<float>(65536.0 / (65536.0 - threshold));
  const uint64_t stream = stream_seed(seed, Stream::dropout);  // apart from the seed's other uses
  const auto k0 = static_cast<uint32_t>(stream), k1 = static_cast<uint32_t>(stream >> 32);
  const auto sample = static_cast<uint32_t>(first_sample + row), where = static_cast<uint32_t>(site),
             when = static_cast<uint32_t>(step);
  const int64_t begin = first_element + first, end = begin + n;  // in the sample's whole tensor
  if (begin < 0 || (end - 1) / kElementsPerDraw > int64_t{UINT32_MAX})
    fail("dropout: element {} lies outside the 2^35 a sample's mask can number", end - 1);
  // Element e of a draw: half e % 2 of word e / 2.
  auto factor = [&](const PhiloxCounter& words, int64_t e) {
    const uint32_t half = words[static_cast<std::size_t>(e / 2)] >> (16 * (e % 2)) & 0xffffu;
    return half < threshold ? 0.0f : kept_scale;
  };
  // The elements of one draw that lie in [begin, end).
  auto partial_draw = [&](int64_t draw) {
    const PhiloxCounter words = philox4x32_10({static_cast<uint32_t>(draw), sample, where, when}, {k0, k1});
    const int64_t at = draw * kElementsPerDraw;
    for (int64_t e = std::max(begin, at); e < std::min(end, at + kElementsPerDraw); ++e)
      out[e - begin] = factor(words, e - at);
  };
  const int64_t first_whole = (begin + kElementsPerDraw - 1) / kElementsPerDraw;  // draws wholly inside
  const int64_t end_whole = end / kElementsPerDraw;
  if (first_whole > end_whole) return partial_draw(begin / kElementsPerDraw);  // all in one draw
  if (begin % kElementsPerDraw != 0) partial_draw(begin / kElementsPerDraw);
  float* body = out + (first_whole * kElementsPerDraw - begin);
#pragma omp simd
  for (int64_t d = 0; d < end_whole - first_whole; ++d) {
    uint32_t c0 = static_cast<uint32_t>(first_whole + d), c1 = sample, c2 = where, c3 = when;
    philox4x32_10_in_place(c0, c1, c2, c3, k0, k1);
    float* f = body + kElementsPerDraw * d;
    f[0] = (c0 & 0xffffu) < threshold ? 0.0f : kept_scale;
    f[1] = (c0 >> 16) < threshold ? 0.0f : kept_scale;
    f[2] = (c1 & 0xffffu) < threshold ? 0.0f : kept_scale;
    f[3] = (c1 >> 16) < threshold ? 0.0f : kept_scale;
    f[4] = (c2 & 0xffffu) < threshold ? 0.0f : kept_scale;
    f[5] = (c2 >> 16) < threshold ? 0.0f : kept_scale;
    f[6] = (c3 & 0xffffu) < threshold ? 0.0f : kept_scale;
    f[7] = (c3 >> 16) < threshold ? 0.0f : kept_scale;
  }
  if (end % kElementsPerDraw != 0) partial_draw(end / kElementsPerDraw);
}

}  // namespace nn
