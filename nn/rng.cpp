#include "nn/rng.hpp"

#include <cmath>
#include <numbers>

namespace nn {

float Rng::normal(float mean, float stddev) {
  // Two uniforms in (0, 1] → one standard normal (the second of the pair is dropped, so
  // every call uses exactly two counter values).
  double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53;
  double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return static_cast<float>(mean + stddev * z);
}

}  // namespace nn
