// bfloat16 for the matrix multiplies of --precision bf16: the top 16 bits of a float — its
// sign, its 8 exponent bits (float's range) and 7 stored mantissa bits (8 significant bits:
// a relative rounding error of at most 2⁻⁸). Kept as raw bits (uint16_t), the layout oneDNN
// and the CPU's vdpbf16ps read.
#pragma once
#include <bit>
#include <cstdint>

namespace nn {

// Round to nearest, ties to even (what PyTorch and the comm library's bfloat16 do); NaN stays NaN.
inline uint16_t to_bf16(float f) {
  const auto u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float from_bf16(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// n floats → n bf16 (threaded when large).
void to_bf16(const float* from, uint16_t* to, int64_t n);
void from_bf16(const uint16_t* from, float* to, int64_t n);

}  // namespace nn
