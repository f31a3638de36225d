// train_dp's batches: which samples each rank draws, for any ranks × micro-batches.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

#include "nn/atomic_file.hpp"
#include "nn/checkpoint.hpp"
#include "nn/rng.hpp"
#include "train_dp_cases.hpp"
#include "trainers/batches.hpp"

TEST_CASE("partition sampling deals one global batch out in disjoint slices") {
  std::vector<int32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  const int T = 8, B = 3;
  for (int N : {2, 3}) {
    trainers::BatchSampler whole(tokens, T, N * B, 1, trainers::Sampling::partition, 7, 0, 1);
    for (int64_t step : {0, 1, 40}) {  // step 40 crosses into the next epoch (124 windows)
      trainers::Batch global, part;
      whole.fill(step, 0, global);
      std::vector<int32_t> joined;
      for (int r = 0; r < N; ++r) {
        trainers::BatchSampler rank(tokens, T, B, 1, trainers::Sampling::partition, 7, r, N);
        rank.fill(step, 0, part);
        joined.insert(joined.end(), part.ids.begin(), part.ids.end());
        for (std::size_t i = 0; i < part.ids.size(); ++i) CHECK(part.targets[i] == part.ids[i] + 1);
      }
      CHECK(joined == global.ids);
    }
  }
}

TEST_CASE("random sampling draws one global batch too: any ranks × micro-batches, the same samples") {
  std::vector<int32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  const int T = 8;
  auto global_batch = [&](int ranks, int micro_steps, int B, int64_t step) {
    std::vector<int32_t> joined(static_cast<std::size_t>(ranks * micro_steps * B * T));
    trainers::Batch part;
    for (int r = 0; r < ranks; ++r) {
      trainers::BatchSampler sampler(tokens, T, B, micro_steps, trainers::Sampling::random, 7, r, ranks);
      for (int m = 0; m < micro_steps; ++m) {
        sampler.fill(step, m, part);
        for (std::size_t i = 0; i < part.ids.size(); ++i) REQUIRE(part.targets[i] == part.ids[i] + 1);
        // sample j of the global batch at j·T
        std::copy(part.ids.begin(), part.ids.end(), joined.begin() + sampler.first_sample(m) * T);
      }
    }
    return joined;
  };
  const std::vector<int32_t> one_rank = global_batch(1, 1, 12, 3);
  CHECK(global_batch(2, 1, 6, 3) == one_rank);
  CHECK(global_batch(3, 2, 2, 3) == one_rank);
  CHECK(global_batch(1, 4, 3, 3) == one_rank);
  CHECK(global_batch(1, 1, 12, 4) != one_rank);  // another step, other samples
}
