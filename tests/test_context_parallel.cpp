// Context parallelism's attention, under mpiexec (the world is the cp group): each rank holds
// its load-balanced positions of the sequence (parallel/cp/context_shard.hpp), and Ulysses and
// ring attention give, on those positions, what one process computes over the whole sequence —
// the output and the gradient of qkv, with dropout on the attention weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "comm/runtime.hpp"
#include "nn/autograd.hpp"
#include "nn/ops.hpp"
#include "parallel/cp/context_shard.hpp"
#include "parallel/cp/ring_attention.hpp"
#include "parallel/cp/ulysses_attention.hpp"

namespace {

using parallel::ContextShard;

// A whole [B,T,W] tensor, the same on every rank.
std::vector<float> pattern(int64_t B, int64_t T, int64_t W, double salt) {
  std::vector<float> v(static_cast<std::size_t>(B * T * W));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.37 * double(i) + salt));
  return v;
}

// The rows of this rank's positions: [B,T,W] → [B,S,W].
std::vector<float> rows_of(const std::vector<float>& whole, int64_t B, int64_t W, const ContextShard& shard) {
  std::vector<float> mine;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < shard.length(); ++s) {
      const auto from = whole.begin() + (b * shard.T + shard.position(s)) * W;
      mine.insert(mine.end(), from, from + W);
    }
  return mine;
}

float largest_difference(std::span<const float> a, const std::vector<float>& b) {
  float most = a.size() == b.size() ? 0.0f : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]));
  return most;
}

struct Whole {
  std::vector<float> y, dqkv;
};

// One process's attention over the whole sequence, and the gradient of qkv for dy.
Whole whole_attention(const std::vector<float>& qkv, const std::vector<float>& dy, int64_t B, int64_t T, int64_t C,
                      int H, const nn::DropoutMask& mask) {
  nn::Tensor x = nn::Tensor::from(qkv, {B, T, 3 * C}, true);
  nn::Tensor y = nn::causal_self_attention(x, H, mask);
  nn::autograd::backward(y, dy);
  return {std::vector<float>(y.data(), y.data() + y.numel()), std::vector<float>(x.grad(), x.grad() + x.numel())};
}

}  // namespace

TEST_CASE("the load-balanced shard: rank r holds chunks r and 2c-1-r, every position once") {
  comm::Communicator& cp = comm::runtime().world();
  const ContextShard shard = ContextShard::of(8 * cp.size(), cp.size(), cp.rank());
  CHECK(shard.length() == 8);
  CHECK(shard.position(0) == 4 * cp.rank());
  CHECK(shard.position(4) == 4 * (2 * cp.size() - 1 - cp.rank()));
  std::vector<int> seen(static_cast<std::size_t>(shard.T), 0);
  for (int r = 0; r < cp.size(); ++r)
    for (int64_t p : shard.of_rank(r).positions()) ++seen.at(static_cast<std::size_t>(p));
  CHECK(std::count(seen.begin(), seen.end(), 1) == shard.T);
  CHECK_THROWS_WITH(ContextShard::of(6 * cp.size() + 1, cp.size(), cp.rank()),
                    Catch::Contains("does not split into 2·cp"));
}

TEST_CASE("Ulysses: every head whole on one rank gives one process's attention and gradients, bit for bit") {
  comm::Communicator& cp = comm::runtime().world();
  const int c = cp.size();
  for (auto [T, H, dropout] : {std::tuple{16 * c, 2 * c, 0.0f}, std::tuple{10 * c, 4 * c, 0.1f}}) {
    const int64_t B = 2, hs = 3, C = H * hs;
    INFO("cp " << c << ", T " << T << ", " << H << " heads, dropout " << dropout);
    const ContextShard shard = ContextShard::of(T, c, cp.rank());
    const nn::DropoutMask mask{.p = dropout, .seed = 7, .step = 3, .site = 5, .first_sample = 4, .first_element = 0};
    const std::vector<float> qkv = pattern(B, T, 3 * C, 0.5), dy = pattern(B, T, C, 1.5);
    const Whole want = whole_attention(qkv, dy, B, T, C, H, mask);

    nn::Tensor x = nn::Tensor::from(rows_of(qkv, B, 3 * C, shard), {B, shard.length(), 3 * C}, true);
    nn::Tensor y = parallel::ulysses_attention(x, H, mask, nn::AttentionKernel::fused, nn::Precision::fp32, shard, cp);
    nn::autograd::backward(y, rows_of(dy, B, C, shard));
    CHECK(largest_difference(y.values(), rows_of(want.y, B, C, shard)) == 0.0f);
    CHECK(largest_difference({x.grad(), static_cast<std::size_t>(x.numel())}, rows_of(want.dqkv, B, 3 * C, shard)) ==
          0.0f);
  }
  if (c > 1) {
    nn::Tensor x = nn::Tensor::zeros({1, 2, 3 * (c + 1)});
    CHECK_THROWS_WITH(parallel::ulysses_attention(x, c + 1, {}, nn::AttentionKernel::fused, nn::Precision::fp32,
                                                  ContextShard::of(2 * c, c, cp.rank()), cp),
                      Catch::Contains("heads do not split over cp"));
  }
}

TEST_CASE("ring attention: keys and values round the ring give one process's attention and gradients") {
  comm::Communicator& cp = comm::runtime().world();
  const int c = cp.size();
  for (auto [T, H, dropout, overlap] : {std::tuple{16 * c, 2, 0.0f, true}, std::tuple{12 * c, 3, 0.1f, true},
                                        std::tuple{12 * c, 3, 0.1f, false}}) {
    const int64_t B = 2, hs = 4, C = H * hs;
    INFO("cp " << c << ", T " << T << ", " << H << " heads, dropout " << dropout << (overlap ? ", overlapped" : ""));
    const ContextShard shard = ContextShard::of(T, c, cp.rank());
    const nn::DropoutMask mask{.p = dropout, .seed = 7, .step = 3, .site = 5, .first_sample = 4, .first_element = 0};
    const std::vector<float> qkv = pattern(B, T, 3 * C, 0.5), dy = pattern(B, T, C, 1.5);
    const Whole want = whole_attention(qkv, dy, B, T, C, H, mask);

    nn::Tensor x = nn::Tensor::from(rows_of(qkv, B, 3 * C, shard), {B, shard.length(), 3 * C}, true);
    nn::Tensor y = parallel::ring_attention(x, H, mask, shard, cp, overlap);
    nn::autograd::backward(y, rows_of(dy, B, C, shard));
    // Another order of the same sums: within float rounding of values of order 1 (measured ≤ 4e-7).
    CHECK(largest_difference(y.values(), rows_of(want.y, B, C, shard)) < 1e-6f);
    CHECK(largest_difference({x.grad(), static_cast<std::size_t>(x.numel())}, rows_of(want.dqkv, B, 3 * C, shard)) <
          1e-6f);
  }
}
