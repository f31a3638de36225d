// bf16_round_bench: the fp32 → bf16 round two ways, side by side in one run — the exact
// round-to-nearest-even that numeric/bf16.hpp writes in integer arithmetic (GCC vectorises
// it), and round_to_bf16's route on the CPU's own vcvtne2ps2bf16 (AVX-512 BF16), whose
// subnormal-holding blocks are redone exactly (docs/nn.md, "What made it fast").
// One thread each, a cache-sized and a DRAM-sized array; GB/s counts 4 bytes read + 2
// written per element, the median of 21 repeats; "differ" counts outputs that are not the
// exact round (0: the instruction route is exact).
//   build/benchmarks/bf16_round_bench
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <omp.h>

#include "numeric/bf16.hpp"

namespace {

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
  const bool has_instruction = numeric::round_uses_bf16_instruction();
  omp_set_num_threads(1);
  std::printf("%-34s %10s %18s %27s %7s\n", "input", "floats", "exact round, GB/s", "vcvtne2ps2bf16 route, GB/s", "differ");
  struct Row {
    const char* input;
    std::size_t n;
    bool every_pattern;
  };
  for (const Row& row : {Row{"bit patterns (1 in 256 subnormal)", 393216, true},  // 1.5 MiB: in cache
                         Row{"activations (normal floats)", 393216, false},
                         Row{"activations (normal floats)", std::size_t{16} << 20, false}}) {  // 64 MiB: DRAM
    std::vector<float> in(row.n);
    for (std::size_t i = 0; i < row.n; ++i) {
      auto bits = static_cast<std::uint32_t>(i * 2654435761u);  // scattered: both signs, every exponent
      if ((bits >> 23 & 0xffu) == 0xffu) bits ^= 0x00800000u;    // but no inf/NaN (exponent 255 → 254)
      in[i] = row.every_pattern ? std::bit_cast<float>(bits) : static_cast<float>(static_cast<int>(bits % 2001) - 1000) / 77.0f;
    }
    std::vector<numeric::bfloat16> exact(row.n), candidate(row.n);
    const double bytes = 6.0 * static_cast<double>(row.n);
    const double exact_s = median_seconds([&] { numeric::round_to_bf16_exact(in, exact); });
    if (!has_instruction) {
      std::printf("%-34s %10zu %18.1f %27s %7s\n", row.input, row.n, bytes / exact_s / 1e9, "(no AVX-512 BF16 here)", "-");
      continue;
    }
    const double candidate_s = median_seconds([&] { numeric::round_to_bf16(in, candidate); });
    std::size_t differ = 0;
    for (std::size_t i = 0; i < row.n; ++i) differ += exact[i] != candidate[i];
    std::printf("%-34s %10zu %18.1f %27.1f %7zu\n", row.input, row.n, bytes / exact_s / 1e9, bytes / candidate_s / 1e9,
                differ);
  }
}
