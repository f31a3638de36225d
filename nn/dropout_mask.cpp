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
  const PhiloxKey key{static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  const int64_t begin = first_element + first, end = begin + n;  // in the sample's whole tensor
  if (begin < 0 || (end - 1) / 4 > int64_t{UINT32_MAX})
    fail("dropout: element {} lies outside the 2^34 a sample's mask can number", end - 1);
  const auto sample = static_cast<uint32_t>(first_sample + row);
  for (int64_t quad = begin / 4; quad * 4 < end; ++quad) {
    const PhiloxCounter words = philox4x32_10(
        {static_cast<uint32_t>(quad), sample, static_cast<uint32_t>(site), static_cast<uint32_t>(step)}, key);
    for (int64_t e = std::max(begin, quad * 4); e < std::min(end, quad * 4 + 4); ++e)
      out[e - begin] = words[static_cast<std::size_t>(e - quad * 4)] < threshold ? 0.0f : kept_scale;
  }
}

}  // namespace nn
