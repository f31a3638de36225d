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

void DropoutMask::factors(int64_t row, int64_t first, int64_t n, float* out) const {
  // A word below p·2³² drops the element: probability p to within 2⁻³².
  const auto threshold = static_cast<uint32_t>(std::min(std::ldexp(static_cast<double>(p), 32), 4294967295.0));
  const float kept_scale = 1.0f / (1.0f - p);
  const uint64_t stream = stream_seed(seed, Stream::dropout);  // apart from the seed's other uses
  const auto k0 = static_cast<uint32_t>(stream), k1 = static_cast<uint32_t>(stream >> 32);
  const auto sample = static_cast<uint32_t>(first_sample + row), where = static_cast<uint32_t>(site),
             when = static_cast<uint32_t>(step);
  const int64_t begin = first_element + first, end = begin + n;  // in the sample's whole tensor
  if (begin < 0 || (end - 1) / 4 > int64_t{UINT32_MAX})
    fail("dropout: element {} lies outside the 2^34 a sample's mask can number", end - 1);
  // The elements of one draw (quad) that lie in [begin, end).
  auto partial_quad = [&](int64_t quad) {
    PhiloxCounter words = philox4x32_10({static_cast<uint32_t>(quad), sample, where, when}, {k0, k1});
    for (int64_t e = std::max(begin, quad * 4); e < std::min(end, quad * 4 + 4); ++e)
      out[e - begin] = words[static_cast<std::size_t>(e - quad * 4)] < threshold ? 0.0f : kept_scale;
  };
  const int64_t first_whole = (begin + 3) / 4, end_whole = end / 4;  // quads wholly inside
  if (first_whole > end_whole) return partial_quad(begin / 4);       // all in one quad
  if (begin % 4 != 0) partial_quad(begin / 4);
  float* body = out + (first_whole * 4 - begin);
#pragma omp simd
  for (int64_t q = 0; q < end_whole - first_whole; ++q) {
    uint32_t c0 = static_cast<uint32_t>(first_whole + q), c1 = sample, c2 = where, c3 = when;
    philox4x32_10_in_place(c0, c1, c2, c3, k0, k1);
    body[4 * q] = c0 < threshold ? 0.0f : kept_scale;
    body[4 * q + 1] = c1 < threshold ? 0.0f : kept_scale;
    body[4 * q + 2] = c2 < threshold ? 0.0f : kept_scale;
    body[4 * q + 3] = c3 < threshold ? 0.0f : kept_scale;
  }
  if (end % 4 != 0) partial_quad(end / 4);
}

}  // namespace nn
