// The bf16 codec (numeric/bf16.hpp): the scalar round against the definition of "nearest, ties
// to even", and the array round — on the CPU's vcvtne2ps2bf16 where it has AVX-512 BF16 — against
// the scalar one, bit for bit, over every exponent and sign, subnormals, ties, inf and NaN.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "numeric/bf16.hpp"

using numeric::bfloat16;

namespace {

// The value a bf16 bit pattern stands for, in double; 0x7f80 (inf) counts as 2¹²⁸, the next
// step above the largest finite bf16, so that "nearest" can choose it as IEEE's overflow does.
double value_of(std::uint16_t magnitude_bits) {
  if (magnitude_bits == 0x7f80) return std::ldexp(1.0, 128);
  return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(magnitude_bits) << 16));
}

// Round to nearest, ties to even, from the definition: of the two bf16 magnitudes around |x|
// take the nearer; on a tie the one whose last bit is 0. Finite x only.
std::uint16_t nearest_even(float x) {
  const auto u = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>(u >> 16 & 0x8000u);
  const auto below = static_cast<std::uint16_t>(u >> 16 & 0x7fffu), above = static_cast<std::uint16_t>(below + 1);
  const double magnitude = std::fabs(static_cast<double>(x));
  const double to_below = magnitude - value_of(below), to_above = value_of(above) - magnitude;
  if (to_below < to_above || (to_below == to_above && (below & 1) == 0)) return sign | below;
  return sign | above;
}

// Every sign, exponent and top mantissa half (the 65536 high halves), each with low halves at
// and around the tie (0x8000) and the ends: 589,824 floats, subnormals, infs and NaNs among them.
std::vector<float> every_high_half() {
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x4000, 0x7fff, 0x8000, 0x8001, 0xc000, 0xfffe, 0xffff};
  std::vector<float> values;
  for (std::uint32_t high = 0; high < 0x10000; ++high)
    for (std::uint32_t low : lows) values.push_back(std::bit_cast<float>(high << 16 | low));
  return values;
}

}  // namespace

TEST_CASE("bfloat16::round is to nearest, ties to even; NaN stays NaN (made quiet); inf stays inf") {
  for (float x : every_high_half()) {
    const std::uint16_t rounded = bfloat16(x).bits;
    if (std::isnan(x)) {
      CHECK(std::isnan(static_cast<float>(bfloat16::from_bits(rounded))));
      CHECK((rounded & 0x40) != 0);
    } else if (std::isinf(x)) {
      CHECK(rounded == (std::bit_cast<std::uint32_t>(x) >> 16));
    } else if (rounded != nearest_even(x)) {
      FAIL_CHECK("round(" << std::hexfloat << x << ") = 0x" << std::hex << rounded << ", nearest even is 0x" << nearest_even(x));
    }
  }
}

TEST_CASE("round_to_bf16 gives the scalar round's bits on every route, at every length and start") {
  if (!numeric::round_uses_bf16_instruction())  // said in the log, not only on failure
    WARN("this CPU has no AVX-512 BF16: only the integer route is tested here");
  const std::vector<float> all = every_high_half();
  std::vector<bfloat16> by_route(all.size()), exact(all.size());
  numeric::round_to_bf16(all, by_route);  // threaded: 589,824 values
  numeric::round_to_bf16_exact(all, exact);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const bfloat16 scalar(all[i]);
    differ += by_route[i] != scalar || exact[i] != scalar;
  }
  CHECK(differ == 0);

  // Short and odd lengths from odd starts (the vector body, its tail, and a block with one
  // subnormal in it redone), and one threaded length that does not split into whole blocks.
  std::vector<float> values(70001 + 3);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(static_cast<int>(i % 977) - 488) / 3.0f;
  values[40] = std::bit_cast<float>(0x00012345u);  // subnormal: the instruction would read 0
  values[70] = std::bit_cast<float>(0x80400001u);
  for (std::size_t start : {0, 1, 3})
    for (std::size_t n : {0, 1, 31, 32, 33, 63, 64, 65, 100, 70001}) {
      const std::span<const float> in(values.data() + start, n);
      std::vector<bfloat16> out(n);
      numeric::round_to_bf16(in, out);
      for (std::size_t i = 0; i < n; ++i)
        if (out[i] != bfloat16(in[i])) FAIL_CHECK("start " << start << ", length " << n << ": value " << i << " differs");
    }
}

TEST_CASE("widen_to_float puts the 16 bits back on top: exact, every pattern") {
  std::vector<bfloat16> all(0x10000);
  for (std::uint32_t b = 0; b < 0x10000; ++b) all[b] = bfloat16::from_bits(static_cast<std::uint16_t>(b));
  std::vector<float> wide(all.size());
  numeric::widen_to_float(all, wide);
  for (std::uint32_t b = 0; b < 0x10000; ++b) REQUIRE(std::bit_cast<std::uint32_t>(wide[b]) == b << 16);
}
