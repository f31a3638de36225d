// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the
// generator behind cuRAND's and JAX's counter-based streams): four 32-bit random words as a
// pure function of a 128-bit counter and a 64-bit key. No state to carry, so the number for
// any counter is drawn directly — what lets a dropout mask be a function of where an element
// sits (nn/dropout_mask.hpp) rather than of the order the ranks happen to draw in.
#pragma once
#include <array>
#include <cstdint>

namespace nn {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// 10 rounds of: two 32×32→64 multiplies, the halves crossed and mixed with the key, which is
// bumped by the Weyl constants between rounds. Random123's known answers: tests/test_nn_ops.cpp.
inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint64_t kMultiplier0 = 0xD2511F53, kMultiplier1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;  // golden ratio, √3 − 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    const uint64_t p0 = kMultiplier0 * c[0], p1 = kMultiplier1 * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

}  // namespace nn
