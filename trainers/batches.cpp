#include "trainers/batches.hpp"

#include <algorithm>
#include <numeric>

namespace trainers {

namespace {
void copy_window(std::span<const int32_t> tokens, int64_t start, int T, int b, Batch& batch) {
  std::copy_n(tokens.begin() + start, T, batch.ids.begin() + static_cast<int64_t>(b) * T);
  std::copy_n(tokens.begin() + start + 1, T, batch.targets.begin() + static_cast<int64_t>(b) * T);
}
}  // namespace

void random_windows(std::span<const int32_t> tokens, int T, int B, nn::Rng& rng, Batch& batch) {
  batch.ids.resize(static_cast<std::size_t>(B) * T);
  batch.targets.resize(batch.ids.size());
  const auto starts = static_cast<uint64_t>(tokens.size()) - static_cast<uint64_t>(T);  // 0 … n−T−1
  for (int b = 0; b < B; ++b) copy_window(tokens, static_cast<int64_t>(rng.next_u64() % starts), T, b, batch);
}

BatchSampler::BatchSampler(std::span<const int32_t> tokens, int block_size, int micro_batch, int accumulation,
                           Sampling sampling, uint64_t seed, int rank, int world_size)
    : tokens_(tokens),
      T_(block_size),
      B_(micro_batch),
      K_(accumulation),
      sampling_(sampling),
      seed_(seed),
      rank_(rank),
      world_size_(world_size),
      windows_((static_cast<int64_t>(tokens.size()) - 1) / block_size) {}

const std::vector<int32_t>& BatchSampler::permutation(int64_t epoch) {
  if (epoch != epoch_) {  // Fisher–Yates with a stream every rank shares
    order_.resize(static_cast<std::size_t>(windows_));
    std::iota(order_.begin(), order_.end(), 0);
    nn::Rng rng(nn::stream_seed(seed_, nn::Stream::window_order, static_cast<uint64_t>(epoch)));
    for (int64_t i = windows_ - 1; i > 0; --i)
      std::swap(order_[i], order_[static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(i + 1))]);
    epoch_ = epoch;
  }
  return order_;
}

void BatchSampler::fill(int64_t step, int micro, Batch& batch) {
  batch.ids.resize(static_cast<std::size_t>(B_) * T_);
  batch.targets.resize(batch.ids.size());
  const int64_t global_batch = static_cast<int64_t>(world_size_) * K_ * B_;
  const auto starts = static_cast<uint64_t>(tokens_.size()) - static_cast<uint64_t>(T_);  // random: 0 … n−T−1
  for (int b = 0; b < B_; ++b) {
    const int64_t j = first_sample(micro) + b;  // the sample's number in the global batch
    if (sampling_ == Sampling::random) {
      const uint64_t draw = nn::stream_seed(seed_, nn::Stream::windows, static_cast<uint64_t>(step), static_cast<uint64_t>(j));
      copy_window(tokens_, static_cast<int64_t>(draw % starts), T_, b, batch);
    } else {
      const int64_t p = step * global_batch + j;
      const int64_t window = permutation(p / windows_)[static_cast<std::size_t>(p % windows_)];
      copy_window(tokens_, window * T_, T_, b, batch);
    }
  }
}

}  // namespace trainers
