// Where each rank's training examples come from. An example is a window of block_size + 1
// consecutive tokens: the input is its first T tokens, the target the same shifted by one.
//
// Every step trains on one global batch of N·K·B samples (N replicas × K micro-batches × B),
// numbered j = 0 … N·K·B − 1, and replica `rank`'s micro-batch `micro` holds samples
//   j = (micro·N + rank)·B + b,   b = 0 … B − 1
// Sample j is a function of (seed, step, j) alone, so any N and K that make the same global
// batch train on the same samples — and j is also what its dropout masks depend on
// (nn/dropout_mask.hpp: first_sample(micro) is handed to the model).
//
//   random    (default) sample j's window starts at a uniform draw from the whole split, a hash
//             of (seed, step, j): nanoGPT's get_batch(), drawn per sample instead of per process.
//   partition the split is cut into non-overlapping windows, shuffled once per epoch with the
//             seed, and dealt out in order: sample j of step s is window p = s·N·K·B + j of
//             the shuffled order (PyTorch's DistributedSampler): no window twice in an epoch.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nn/rng.hpp"

namespace trainers {

enum class Sampling { random, partition };
inline constexpr std::array<std::string_view, 2> kSamplingNames = {"random", "partition"};  // --sampling

struct Batch {
  std::vector<int32_t> ids;      // [B,T]
  std::vector<int32_t> targets;  // [B,T]
};

// B random windows of T+1 tokens from `tokens` (which must hold at least T+1).
void random_windows(std::span<const int32_t> tokens, int T, int B, nn::Rng& rng, Batch& batch);

class BatchSampler {
 public:
  BatchSampler(std::span<const int32_t> tokens, int block_size, int micro_batch, int accumulation, Sampling sampling,
               uint64_t seed, int rank, int world_size);
  // The micro-batch of `micro` (0 … K−1) in optimizer step `step`: depends on nothing else,
  // so a resumed run draws exactly what an uninterrupted one would.
  void fill(int64_t step, int micro, Batch& batch);
  // Its first sample's number j in the step's global batch.
  int64_t first_sample(int micro) const { return (static_cast<int64_t>(micro) * world_size_ + rank_) * B_; }

 private:
  const std::vector<int32_t>& permutation(int64_t epoch);

  std::span<const int32_t> tokens_;
  int T_, B_, K_;
  Sampling sampling_;
  uint64_t seed_;
  int rank_, world_size_;
  int64_t windows_;  // partition: non-overlapping windows in the split
  int64_t epoch_ = -1;
  std::vector<int32_t> order_;  // partition: window order of epoch_
};

}  // namespace trainers
