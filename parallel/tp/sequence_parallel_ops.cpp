#include "parallel/tp/sequence_parallel_ops.hpp"

#include <algorithm>
#include <vector>

#include "nn/autograd.hpp"

namespace parallel {
namespace {

// [B, P, S, C] ↔ [P, B, S, C]: `to_blocks` moves position block p of every sequence into
// contiguous block p (for the collective); the other direction moves it back.
void reorder(const float* from, float* to, int64_t B, int64_t P, int64_t S, int64_t C, bool to_blocks) {
  const int64_t run = S * C;  // one sequence's positions of one block
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < P; ++p) {
      const int64_t sequence_major = (b * P + p) * run, block_major = (p * B + b) * run;
      if (to_blocks)
        std::copy_n(from + sequence_major, run, to + block_major);
      else
        std::copy_n(from + block_major, run, to + sequence_major);
    }
}

// whole [B,T,C] sequence-major → every rank's [B,T/P,C] summed over tp, this rank's returned.
void reduce_scatter_positions(const float* whole, float* mine, int64_t B, int64_t T, int64_t C,
                              comm::Communicator& tp) {
  const int64_t P = tp.size(), S = T / P;
  std::vector<float> blocks(static_cast<std::size_t>(B * T * C));
  reorder(whole, blocks.data(), B, P, S, C, /*to_blocks=*/true);
  tp.reduce_scatter(std::span<const float>(blocks), std::span<float>(mine, static_cast<std::size_t>(B * S * C)));
}

// mine [B,T/P,C] from every rank → whole [B,T,C] sequence-major.
void allgather_positions(const float* mine, float* whole, int64_t B, int64_t T, int64_t C, comm::Communicator& tp) {
  const int64_t P = tp.size(), S = T / P;
  std::vector<float> blocks(static_cast<std::size_t>(B * T * C));
  tp.allgather(std::span<const float>(mine, static_cast<std::size_t>(B * S * C)), std::span<float>(blocks));
  reorder(blocks.data(), whole, B, P, S, C, /*to_blocks=*/false);
}

}  // namespace

// forward:  y [B,T,C] = all-gather of x [B,T/tp,C] along T
// backward: dx += reduce-scatter of dy along T
nn::Tensor gather_from_sequence_parallel(const nn::Tensor& x, comm::Communicator& tp) {
  const int64_t B = x.size(0), S = x.size(1), C = x.size(2), T = S * tp.size();
  const bool track = nn::autograd::needs_grad({&x});
  nn::Tensor y = nn::Tensor::empty({B, T, C}, track);
  allgather_positions(x.data(), y.data(), B, T, C, tp);
  if (track) {
    nn::autograd::record([x, y, B, T, C, &tp]() {
      std::vector<float> mine(static_cast<std::size_t>(x.numel()));
      reduce_scatter_positions(y.grad(), mine.data(), B, T, C, tp);
      auto [dx, accumulate] = x.grad_target();
      for (std::size_t i = 0; i < mine.size(); ++i) dx[i] = (accumulate ? dx[i] : 0.0f) + mine[i];
    });
  }
  return y;
}

// forward:  y [B,T/tp,C] = reduce-scatter of x [B,T,C] along T
// backward: dx += all-gather of dy along T
nn::Tensor reduce_scatter_to_sequence_parallel(const nn::Tensor& x, comm::Communicator& tp) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), S = T / tp.size();
  const bool track = nn::autograd::needs_grad({&x});
  nn::Tensor y = nn::Tensor::empty({B, S, C}, track);
  reduce_scatter_positions(x.data(), y.data(), B, T, C, tp);
  if (track) {
    nn::autograd::record([x, y, B, T, C, &tp]() {
      std::vector<float> whole(static_cast<std::size_t>(x.numel()));
      allgather_positions(y.grad(), whole.data(), B, T, C, tp);
      auto [dx, accumulate] = x.grad_target();
      for (std::size_t i = 0; i < whole.size(); ++i) dx[i] = (accumulate ? dx[i] : 0.0f) + whole[i];
    });
  }
  return y;
}

}  // namespace parallel
