// bf16_round_bench: the fp32 → bf16 round two ways, side by side in one run — the exact
// round-to-nearest-even that numeric/bf16.hpp writes in integer arithmetic (GCC vectorises
// it), and the CPU's own vcvtne2ps2bf16 (AVX-512 BF16), the candidate docs/nn.md weighs.
// One thread each, a cache-sized and a DRAM-sized array; GB/s counts 4 bytes read + 2
// written per element, the median of 21 repeats; "differ" counts outputs that are not the
// exact round (the instruction flushes subnormal inputs to zero).
//   build/benchmarks/bf16_round_bench
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <omp.h>

#include "numeric/bf16.hpp"

namespace {

// The candidate: 32 floats per instruction, the rest through the exact round.
__attribute__((target("avx512bf16,avx512f"))) void round_with_bf16_instruction(const float* in, std::uint16_t* out,
                                                                                 std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh pair = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + i + 16), _mm512_loadu_ps(in + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(pair));
  }
  for (; i < n; ++i) out[i] = numeric::bfloat16(in[i]).bits;
}

template <class Run>
double median_seconds(Run run) {
  std::vector<double> seconds;
  for (int r = 0; r < 21; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main() {
  const bool has_instruction = __builtin_cpu_supports("avx512bf16");
  omp_set_num_threads(1);
  std::printf("%-12s %22s %26s %8s\n", "floats", "exact round, GB/s", "vcvtne2ps2bf16, GB/s", "differ");
  for (std::size_t n : {std::size_t{393216}, std::size_t{16} << 20}) {  // 1.5 MiB (cache), 64 MiB (DRAM)
    std::vector<float> in(n);
    for (std::size_t i = 0; i < n; ++i) {  // scattered bit patterns: both signs, subnormals; no inf/NaN
      auto bits = static_cast<std::uint32_t>(i * 2654435761u);
      if ((bits >> 23 & 0xffu) == 0xffu) bits ^= 0x00800000u;  // exponent 255 → 254
      in[i] = std::bit_cast<float>(bits);
    }
    std::vector<numeric::bfloat16> exact(n);
    std::vector<std::uint16_t> candidate(n);
    const double bytes = 6.0 * static_cast<double>(n);
    const double exact_s = median_seconds([&] { numeric::round_to_bf16(in, exact); });
    if (!has_instruction) {
      std::printf("%-12zu %22.1f %26s %8s\n", n, bytes / exact_s / 1e9, "(no AVX-512 BF16 here)", "-");
      continue;
    }
    const double candidate_s = median_seconds([&] { round_with_bf16_instruction(in.data(), candidate.data(), n); });
    std::size_t differ = 0;
    for (std::size_t i = 0; i < n; ++i) differ += exact[i].bits != candidate[i];
    std::printf("%-12zu %22.1f %26.1f %8zu\n", n, bytes / exact_s / 1e9, bytes / candidate_s / 1e9, differ);
  }
}
