// Random numbers: every stream of a run derived from the seed by one function, and a
// counter-based generator whose n-th number is a hash of (seed, n) — its whole state is two
// integers, so nothing needs saving beyond the seed and the step.
#pragma once
#include <cstdint>

#include "numeric/hash.hpp"

namespace nn {

// What a stream is for. Each is a pure function of (seed, purpose, a, b), so a resumed run
// draws exactly the numbers an uninterrupted one would. Training's own randomness — which
// samples, which dropout masks — never takes the rank (trainers/batches.hpp,
// nn/dropout_mask.hpp): no layout changes it.
enum class Stream : uint64_t {
  init = 1,          // a model's initial weights (a: the rank, where ranks start apart)
  eval = 3,          // evaluation batches (a: rank, b: evaluation number)
  sample = 4,        // sampled text (a: which sample)
  windows = 5,       // --sampling random: sample b's window at step a
  window_order = 6,  // --sampling partition: the windows' order in epoch a
  dropout = 7,       // the key of every dropout mask
};
constexpr uint64_t stream_seed(uint64_t seed, Stream s, uint64_t a = 0, uint64_t b = 0) {
  return numeric::hash_combine(numeric::hash_combine(seed ^ (static_cast<uint64_t>(s) * 0x9e3779b97f4a7c15ULL), a), b);
}

// A float uniform in [0, 1) from 24 random bits.
inline float unit_float(uint64_t bits) { return static_cast<float>(bits >> 40) * 0x1.0p-24f; }

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t counter = 0) : seed_(seed), counter_(counter) {}
  uint64_t next_u64() { return numeric::hash_combine(seed_, counter_++); }
  float uniform() { return unit_float(next_u64()); }
  float normal(float mean, float stddev);  // Box–Muller
  uint64_t seed() const { return seed_; }
  uint64_t counter() const { return counter_; }

 private:
  uint64_t seed_;
  uint64_t counter_;
};

}  // namespace nn
