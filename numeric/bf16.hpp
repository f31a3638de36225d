// bfloat16, the one 16-bit float every layer uses: the matrix multiplies of --precision bf16
// (nn/autocast.hpp), gradients on the wire with --grad-comm bf16 (parallel/dp/gradient_wire.hpp)
// and the bf16 collectives (comm/types.hpp).
//
// Its bits are the top 16 bits of a float — the sign, the 8 exponent bits (float's range) and
// 7 stored mantissa bits (8 significant bits: a relative rounding error of at most 2⁻⁸):
//
//   float     s eeeeeeee mmmmmmm mmmmmmmmmmmmmmmm
//   bfloat16  s eeeeeeee mmmmmmm                   (the low half rounded away)
//
// Rounding is to nearest, ties to even, as PyTorch does (and the CPU's vcvtneps2bf16, but for
// flushing subnormal inputs to zero: docs/nn.md, "What made it fast"); NaN stays NaN. Widening
// back to float is exact: append 16 zero bits. The layout (one uint16_t) is the
// one oneDNN and the CPU's vdpbf16ps read, so a bfloat16 array is handed to them as it is.
#pragma once
#include <bit>
#include <cstdint>
#include <span>
#include <type_traits>

namespace numeric {

struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  template <class N>
    requires std::is_arithmetic_v<N>
  explicit bfloat16(N value) : bits(round(static_cast<float>(value))) {}
  static constexpr bfloat16 from_bits(std::uint16_t b) {
    bfloat16 x;
    x.bits = b;
    return x;
  }
  explicit operator float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
  explicit operator double() const { return static_cast<float>(*this); }
  friend bool operator==(bfloat16, bfloat16) = default;  // bitwise

  // Round to nearest even: add 0x7fff, plus 1 when the kept half is odd, and drop the low half.
  static std::uint16_t round(float f) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
    return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

// The codec for arrays (threaded when large): from and to have the same length. Both routes of
// the round give bfloat16::round's bits: on a CPU with AVX-512 BF16 it runs on the CPU's
// vcvtne2ps2bf16 (32 values per instruction; blocks holding a subnormal redone exactly),
// elsewhere on the integer round above; round_to_bf16_exact takes the integer route anywhere
// (the reference the tests and benchmarks/bf16_round_bench hold the instruction to).
void round_to_bf16(std::span<const float> from, std::span<bfloat16> to);
void round_to_bf16_exact(std::span<const float> from, std::span<bfloat16> to);
bool round_uses_bf16_instruction();  // this CPU has AVX-512 BF16, so round_to_bf16 uses it
void widen_to_float(std::span<const bfloat16> from, std::span<float> to);

}  // namespace numeric
