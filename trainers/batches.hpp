// Where each rank's training examples come from. An example is a window of block_size + 1
// consecutive tokens: the input is its first T tokens, the target the same shifted by one.
//
//   random    (default) every rank draws window starts uniformly from the whole split with
//             its own random stream (seed, rank, step, micro-step): unique data per rank,
//             as nanoGPT's get_batch() does on each process.
//   partition the split is cut into non-overlapping windows, shuffled once per epoch with a
//             seed every rank shares, and dealt out in order: global position
//               p = ((step·K + micro)·N + rank)·B + b
//             so the ranks' micro-batches are disjoint slices of one global batch (PyTorch's
//             DistributedSampler). N ranks × batch B see exactly what 1 rank × batch N·B sees.
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
