#include "nn/moe_mlp.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/ops.hpp"

namespace nn {

int64_t expert_capacity(int64_t T, int n_experts, int experts_per_token, double capacity_factor) {
  // (at most T: an expert is one choice of a token at most; and a huge f stays a number)
  const double slots = std::ceil(capacity_factor * experts_per_token * static_cast<double>(T) / n_experts);
  return static_cast<int64_t>(std::min(slots, static_cast<double>(T)));
}

// Sequence by sequence: every token's k choices (a stable sort of its experts by falling
// probability: ties keep the lower index first), then the slots taken position by position,
// each token's choices in rank order — so that whether a choice is kept depends on earlier
// tokens alone (the model stays causal), and an expert, once full, drops the later ones. A run
// of positions starts from the choices of the sequence's positions before it: an expert has
// taken min(capacity, those choices) slots there (every choice is kept until it is full).
Routing route_tokens(std::span<const float> probs, int64_t G, int64_t T, const MoESettings& s, int runs,
                     const CountChoices& count) {
  const int E = s.n_experts, k = s.experts_per_token;
  if (static_cast<int64_t>(probs.size()) != G * T * E)
    fail("route_tokens: {} probabilities for {} sequences of {} tokens and {} experts", probs.size(), G, T, E);
  if (T > s.sequence_length) fail("route_tokens: {} tokens in a sequence of at most {}", T, s.sequence_length);
  if (runs < 1 || T % runs != 0) fail("route_tokens: {} tokens do not split into {} runs", T, runs);
  const int64_t capacity = expert_capacity(s.sequence_length, E, k, s.capacity_factor), run = T / runs;
  // The choices, [G,T,k], and how many of each run's named each expert, [G,runs,E].
  std::vector<int32_t> choice(static_cast<std::size_t>(G * T * k));
  std::vector<int64_t> mine(static_cast<std::size_t>(G * runs * E), 0);
  std::vector<int32_t> order(static_cast<std::size_t>(E));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t t = 0; t < T; ++t) {
      const float* p = probs.data() + (g * T + t) * E;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [p](int32_t a, int32_t b) { return p[a] > p[b]; });
      for (int j = 0; j < k; ++j) {
        choice[static_cast<std::size_t>((g * T + t) * k + j)] = order[static_cast<std::size_t>(j)];
        ++mine[static_cast<std::size_t>((g * runs + t / run) * E + order[static_cast<std::size_t>(j)])];
      }
    }
  std::vector<int64_t> before(mine.size()), whole(static_cast<std::size_t>(G * E));
  count(mine, before, whole);
  Routing r;
  r.rows.resize(static_cast<std::size_t>(E));
  r.gate.resize(static_cast<std::size_t>(E));
  r.shares.assign(static_cast<std::size_t>(G * E), 0.0f);
  std::vector<int64_t> used(static_cast<std::size_t>(E));
  for (int64_t g = 0; g < G; ++g) {
    int64_t choices = 0;  // the whole sequence's: k per position
    for (int e = 0; e < E; ++e) choices += whole[static_cast<std::size_t>(g * E + e)];
    for (int e = 0; e < E; ++e)
      r.shares[static_cast<std::size_t>(g * E + e)] =
          static_cast<float>(whole[static_cast<std::size_t>(g * E + e)]) / static_cast<float>(choices);
    for (int64_t t = 0; t < T; ++t) {
      if (t % run == 0)  // a run begins: what the sequence's earlier positions took
        for (int e = 0; e < E; ++e)
          used[static_cast<std::size_t>(e)] =
              std::min(capacity, before[static_cast<std::size_t>((g * runs + t / run) * E + e)]);
      for (int j = 0; j < k; ++j) {
        const int32_t e = choice[static_cast<std::size_t>((g * T + t) * k + j)];
        if (used[static_cast<std::size_t>(e)] == capacity) {
          ++r.dropped;
          continue;
        }
        ++used[static_cast<std::size_t>(e)];
        r.rows[static_cast<std::size_t>(e)].push_back(static_cast<int32_t>(g * T + t));
        r.gate[static_cast<std::size_t>(e)].push_back((g * T + t) * E + e);
      }
    }
  }
  return r;
}

Routing route_tokens(std::span<const float> probs, int64_t G, int64_t T, const MoESettings& s) {
  WholeSequence here;  // one run, the whole sequence
  return route_tokens(probs, G, T, s, 1, [&](std::span<const int64_t> mine, std::span<int64_t> before,
                                             std::span<int64_t> whole) {
    here.count_choices(mine, G, 1, s.n_experts, before, whole, false);
  });
}

Tensor moe_mlp(const Tensor& h, const MoEWeights& w, const MoESettings& s, Precision precision, bool fused_bias_gelu,
               float loss_scale, RoutingStats* stats, int layer, TokenDispatcher& dispatcher, SequenceLayout& sequence,
               bool training) {
  if (h.ndim() != 3) fail("moe_mlp: h must be [B,T,C], got {}", shape_string(h.shape()));
  const int64_t B = h.size(0), T = h.size(1), C = h.size(2), E = s.n_experts;
  // The router in fp32 whatever the precision: which expert a token goes to should not hang on
  // a bf16 rounding.
  Tensor probs = softmax(linear(h, w.router_weight, {}, "GEMM moe.router", Precision::fp32));  // [B,T,E]
  // The positions held here: one run of each sequence, or (context parallelism) two.
  const int runs = sequence.stream_place(T, training).second < 0 ? 1 : 2;
  const Routing routing =
      route_tokens(probs.values(), B, T, s, runs,
                   [&](std::span<const int64_t> mine, std::span<int64_t> before, std::span<int64_t> whole) {
                     sequence.count_choices(mine, B, runs, static_cast<int>(E), before, whole, training);
                   });

  // Each expert, the block's MLP on its rows: [M_e,C] → [M_e,4C] → [M_e,C], its weights whole.
  // An expert with no rows computes nothing; under expert parallelism the rows travel to the
  // expert's rank and back.
  WholeWeights whole;
  const auto expert = [&](int e, const Tensor& rows) {
    const ExpertWeights& x = w.experts[static_cast<std::size_t>(e)];
    if (!x.c_fc_weight.defined()) fail("moe_mlp: expert {} is not held here", e);
    return mlp(rows, x, whole, precision, fused_bias_gelu, /*training=*/true, {"GEMM expert.c_fc", "GEMM expert.c_proj"});
  };
  const std::vector<Tensor> outputs = dispatcher.run_experts(h, routing.rows, expert);
  // (capacity ≥ 1: the first token of a sequence always keeps its first choice)
  Tensor y = combine_rows(outputs, routing.rows, probs, routing.gate, B * T);  // [B·T,C]
  const Tensor aux = load_balancing_loss(probs, routing.shares);
  if (stats) {
    std::vector<int64_t>& tokens = stats->tokens_per_expert[layer];
    tokens.resize(static_cast<std::size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      tokens[static_cast<std::size_t>(e)] +=
          static_cast<int64_t>(routing.rows[static_cast<std::size_t>(e)].size());
    stats->choices += B * T * s.experts_per_token;
    stats->dropped += routing.dropped;
    stats->aux_loss += aux.item();
    stats->aux_terms += 1;
  }
  if (autograd::grad_enabled()) y = attach_loss(y, aux, s.aux_loss_weight * loss_scale);
  return y.view({B, T, C});
}

}  // namespace nn
