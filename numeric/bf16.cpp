#include "numeric/bf16.hpp"

#include <cstddef>

namespace numeric {

// Below this many values a thread team costs more than it saves.
constexpr std::ptrdiff_t kThreadedFrom = 65536;

void round_to_bf16(std::span<const float> from, std::span<bfloat16> to) {
  const auto n = static_cast<std::ptrdiff_t>(from.size());
  const float* in = from.data();
  bfloat16* out = to.data();
#pragma omp parallel for schedule(static) if (n > kThreadedFrom)
  for (std::ptrdiff_t i = 0; i < n; ++i) out[i] = bfloat16(in[i]);
}

void widen_to_float(std::span<const bfloat16> from, std::span<float> to) {
  const auto n = static_cast<std::ptrdiff_t>(from.size());
  const bfloat16* in = from.data();
  float* out = to.data();
#pragma omp parallel for schedule(static) if (n > kThreadedFrom)
  for (std::ptrdiff_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

}  // namespace numeric
