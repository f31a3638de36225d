// Expert parallelism's dispatch, under mpiexec (the world is the ep group): each rank routes
// its own tokens to 2 experts per rank, and ExpertParallelDispatcher::run_experts — rows sent to
// their expert's rank and the outputs back — gives what one process computes with every
// expert: the outputs, the tokens' gradients and the experts' weight gradients (summed over
// every rank's tokens). With an expert nobody chose, a rank that sends one expert nothing, and
// a rank with no tokens at all.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "comm/runtime.hpp"
#include "nn/autograd.hpp"
#include "nn/ops.hpp"
#include "parallel/ep/expert_parallel_layers.hpp"

namespace {

constexpr int64_t C = 6;

std::vector<float> pattern(int64_t n, double salt) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.37 * double(i) + salt));
  return v;
}

int64_t tokens_of(int rank, bool empty_last, int ranks) { return empty_last && rank == ranks - 1 ? 0 : 5 + 3 * rank; }

// Rank r's rows for each of E experts: expert 1 is chosen by nobody, expert 0 not by rank 0.
std::vector<std::vector<int32_t>> rows_of(int rank, int64_t N, int E) {
  std::vector<std::vector<int32_t>> rows(static_cast<std::size_t>(E));
  for (int e = 0; e < E; ++e)
    for (int32_t t = 0; t < N; ++t)
      if (e != 1 && !(e == 0 && rank == 0) && (t + rank + e) % 3 != 1) rows[e].push_back(t);
  return rows;
}

// The experts' weights [C,C], the same numbers on every rank (each keeps the ones it holds).
std::vector<nn::Tensor> expert_weights(int E) {
  std::vector<nn::Tensor> w;
  for (int e = 0; e < E; ++e) w.push_back(nn::Tensor::from(pattern(C * C, 10.0 + e), {C, C}, true));
  return w;
}

struct Result {
  std::vector<float> y, dtokens;
};

// One rank's mixture: the experts' outputs put back in their tokens' rows [N,C] (a gate of 1),
// and backward from a fixed dy.
Result run(nn::TokenDispatcher& layers, const std::vector<nn::Tensor>& weights, int rank, int64_t N, int E) {
  nn::Tensor tokens = nn::Tensor::from(pattern(N * C, rank), {N, C}, true);
  const auto rows = rows_of(rank, N, E);
  const auto expert = [&](int e, const nn::Tensor& x) {
    REQUIRE(layers.holds_expert(e, E));
    return nn::linear(x, weights[static_cast<std::size_t>(e)], {}, "GEMM expert", nn::Precision::fp32);
  };
  const std::vector<nn::Tensor> outputs = layers.run_experts(tokens, rows, expert);
  REQUIRE(outputs.size() == rows.size());
  std::vector<float> y(static_cast<std::size_t>(N * C), 0.0f);
  nn::Tensor sum;  // Σ over experts of y_e · dy_e, whose backward seeds each output's gradient
  for (int e = 0; e < E; ++e) {
    CHECK(outputs[e].defined() == !rows[e].empty());
    if (!outputs[e].defined()) continue;
    for (std::size_t m = 0; m < rows[e].size(); ++m)
      for (int64_t c = 0; c < C; ++c) y[rows[e][m] * C + c] += outputs[e].data()[m * C + c];
    const nn::Tensor dy = nn::Tensor::from(pattern(outputs[e].numel(), 100.0 + rank + e), outputs[e].shape());
    const nn::Tensor term = nn::sum(nn::mul(outputs[e], dy));
    sum = sum.defined() ? nn::add(sum, term) : term;
  }
  if (sum.defined()) {
    nn::autograd::backward(sum);
  } else {  // no rows of its own: its peers' rows still pass through it in backward
    nn::Tensor nothing = nn::Tensor::zeros({1}, true);
    nn::autograd::backward(nothing);
  }
  return {y, N > 0 ? std::vector<float>(tokens.grad(), tokens.grad() + N * C) : std::vector<float>{}};
}

float largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float most = a.size() == b.size() ? 0.0f : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]));
  return most;
}

}  // namespace

TEST_CASE("expert parallelism: rows to their experts' ranks and back give one process's outputs and gradients") {
  comm::Communicator& ep = comm::runtime().world();
  const int W = ep.size(), E = 2 * W;
  for (bool empty_last : {false, true}) {
    INFO("ep " << W << (empty_last ? ", the last rank without tokens" : ""));
    // One process: every rank's tokens through every expert, the weights' gradients summed.
    nn::LocalDispatcher whole;  // the dispatcher of one process
    const std::vector<nn::Tensor> reference_weights = expert_weights(E);
    std::vector<Result> reference;
    for (int r = 0; r < W; ++r) reference.push_back(run(whole, reference_weights, r, tokens_of(r, empty_last, W), E));

    parallel::ExpertParallelDispatcher layers(ep);  // the all-to-all one
    const std::vector<nn::Tensor> weights = expert_weights(E);
    const Result mine = run(layers, weights, ep.rank(), tokens_of(ep.rank(), empty_last, W), E);
    CHECK(largest_difference(mine.y, reference[ep.rank()].y) == 0.0f);  // row by row: the same products
    CHECK(largest_difference(mine.dtokens, reference[ep.rank()].dtokens) <= 1e-6f);
    int held = 0;
    for (int e = 0; e < E; ++e) {
      if (!layers.holds_expert(e, E)) continue;
      ++held;
      const auto& w = weights[e];
      const auto& r = reference_weights[e];
      INFO("expert " << e);
      CHECK(largest_difference(std::vector<float>(w.grad(), w.grad() + w.numel()),
                               std::vector<float>(r.grad(), r.grad() + r.numel())) <= 1e-5f);
    }
    CHECK(held == 2);
    CHECK(parallel::first_expert(ep.rank(), E, W) == 2 * ep.rank());
  }
}

TEST_CASE("expert parallelism: experts that do not split over the group are refused") {
  comm::Communicator& ep = comm::runtime().world();
  parallel::ExpertParallelDispatcher layers(ep);
  if (ep.size() > 1) CHECK_THROWS_WITH(layers.holds_expert(0, ep.size() + 1), Catch::Contains("do not split over"));
  CHECK(layers.sum_over_holders(1.0) == ep.size());  // Σ g² of the experts: each rank's own, summed
}
