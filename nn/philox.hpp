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
// On four words in place, so that a loop of draws vectorises (nn/dropout_mask.cpp: 8 draws per
// AVX-512 multiply; the std::array form below does not).
inline void philox4x32_10_in_place(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
  constexpr uint64_t kMultiplier0 = 0xD2511F53, kMultiplier1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;  // golden ratio, √3 − 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    const uint64_t p0 = kMultiplier0 * c0, p1 = kMultiplier1 * c2;
    const uint32_t next0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, next2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = next0;
    c2 = next2;
  }
}

inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  philox4x32_10_in_place(c[0], c[1], c[2], c[3], k[0], k[1]);
  return c;
}

}  // namespace nn
