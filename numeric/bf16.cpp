#include "numeric/bf16.hpp"

#include <algorithm>
#include <cstddef>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace numeric {

// Below this many values a thread team costs more than it saves.
constexpr std::ptrdiff_t kThreadedFrom = 65536;

namespace {

// The exact round, one value at a time; GCC vectorises the integer arithmetic (AVX-512: 16 lanes).
void round_exact(const float* in, bfloat16* out, std::ptrdiff_t n) {
  for (std::ptrdiff_t i = 0; i < n; ++i) out[i] = bfloat16(in[i]);
}

#if defined(__x86_64__)
// The CPU's own round: vcvtne2ps2bf16 turns 32 floats into 32 bf16 in one instruction, to
// nearest even and NaN made quiet as bfloat16::round does — but it reads a subnormal input
// (exponent bits 0, mantissa not 0) as zero. Such inputs are rare (below 1.2e-38), so a block
// that has one is redone with the exact round: the result is bfloat16::round's, bit for bit.
__attribute__((target("avx512bf16,avx512bw,avx512f"))) void round_with_instruction(const float* in, bfloat16* out,
                                                                                   std::ptrdiff_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), magnitude = _mm512_set1_epi32(0x7fffffff);
  std::ptrdiff_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i low = _mm512_loadu_si512(in + i), high = _mm512_loadu_si512(in + i + 16);
    // Subnormal lanes: no exponent bit set, some magnitude bit set (±0 rounds right as it is).
    const __mmask16 low_subnormal = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(low, exponent), low, magnitude);
    const __mmask16 high_subnormal =
        _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(high, exponent), high, magnitude);
    if ((low_subnormal | high_subnormal) != 0) [[unlikely]] {
      round_exact(in + i, out + i, 32);
      continue;
    }
    const __m512bh rounded = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(high), _mm512_castsi512_ps(low));
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(rounded));
  }
  round_exact(in + i, out + i, n - i);
}

// Asked on first use, not at static initialisation: another file's static initialiser may
// round before this file's would have run.
bool cpu_has_bf16_round() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}
#else
bool cpu_has_bf16_round() { return false; }
#endif

// Each thread of the team rounds its own run of whole 32-value blocks (the last one may be short).
template <class Round>
void round_in_parallel(const float* in, bfloat16* out, std::ptrdiff_t n, Round round) {
#pragma omp parallel if (n > kThreadedFrom)
  {
#ifdef _OPENMP
    const std::ptrdiff_t parts = omp_get_num_threads(), part = omp_get_thread_num();
#else
    const std::ptrdiff_t parts = 1, part = 0;
#endif
    const std::ptrdiff_t blocks = (n + 31) / 32;
    const std::ptrdiff_t begin = std::min(n, blocks * part / parts * 32), end = std::min(n, blocks * (part + 1) / parts * 32);
    round(in + begin, out + begin, end - begin);
  }
}

}  // namespace

bool round_uses_bf16_instruction() { return cpu_has_bf16_round(); }

void round_to_bf16(std::span<const float> from, std::span<bfloat16> to) {
  const auto n = static_cast<std::ptrdiff_t>(from.size());
#if defined(__x86_64__)
  if (cpu_has_bf16_round()) return round_in_parallel(from.data(), to.data(), n, round_with_instruction);
#endif
  round_in_parallel(from.data(), to.data(), n, round_exact);
}

void round_to_bf16_exact(std::span<const float> from, std::span<bfloat16> to) {
  round_in_parallel(from.data(), to.data(), static_cast<std::ptrdiff_t>(from.size()), round_exact);
}

// Exact by construction: the 16 bits become the top half of a float (GCC vectorises the shift).
void widen_to_float(std::span<const bfloat16> from, std::span<float> to) {
  const auto n = static_cast<std::ptrdiff_t>(from.size());
  const bfloat16* in = from.data();
  float* out = to.data();
#pragma omp parallel for schedule(static) if (n > kThreadedFrom)
  for (std::ptrdiff_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

}  // namespace numeric
