// A counter-based random generator: the n-th number is a hash of (seed, n). Its whole
// state is two integers (easy to checkpoint), and a dropout mask element depends only on
// (stream, index), so masks are the same whatever the number of threads.
#pragma once
#include <cstdint>

namespace nn {

// splitmix64's finaliser: a good 64-bit mixing function.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t hash64(uint64_t key, uint64_t index) { return mix64(key ^ mix64(index)); }

// A float uniform in [0, 1) from 24 random bits.
inline float unit_float(uint64_t bits) { return static_cast<float>(bits >> 40) * 0x1.0p-24f; }

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t counter = 0) : seed_(seed), counter_(counter) {}
  uint64_t next_u64() { return hash64(seed_, counter_++); }
  float uniform() { return unit_float(next_u64()); }
  float normal(float mean, float stddev);  // Box–Muller
  uint64_t seed() const { return seed_; }
  uint64_t counter() const { return counter_; }

 private:
  uint64_t seed_;
  uint64_t counter_;
};

}  // namespace nn
