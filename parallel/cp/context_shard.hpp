// Which positions of a sequence a context-parallel rank holds.
//
// Under context parallelism each of the c ranks of the cp group holds S = T/c positions of every
// sequence. Everything but attention is position-wise and runs on them alone; attention needs
// the keys and values of other positions (ring_attention.hpp, ulysses_attention.hpp).
//
// The causal mask makes a late position attend to many positions and an early one to few, so
// T/c consecutive positions per rank would leave rank 0 almost idle and rank c−1 with most of
// the work (the plain split: rank r's share of the causal square grows as 2r + 1). Cut into 2c
// chunks instead, rank r holds chunks r and 2c−1−r — one from each end — and every rank has the
// same share (Megatron core's load balance):
//
//   c = 2, T = 8:  chunks [0 1][2 3][4 5][6 7]   rank 0: chunks 0, 3 → positions 0 1 6 7
//                                                rank 1: chunks 1, 2 → positions 2 3 4 5
//
// Local position s < S/2 is in the first chunk, s ≥ S/2 in the second.
#pragma once
#include <cstdint>
#include <vector>

namespace parallel {

struct ContextShard {
  int64_t T = 0;  // the whole sequence
  int ranks = 1;  // c
  int rank = 0;

  // T must split into 2c chunks (refused in one line otherwise).
  static ContextShard of(int64_t T, int ranks, int rank);
  int64_t length() const { return T / ranks; }        // S
  int64_t chunk() const { return T / (2 * ranks); }  // T/(2c)
  // The global position of local position s ∈ [0, S).
  int64_t position(int64_t s) const {
    const int64_t half = chunk();
    return s < half ? rank * half + s : (2 * ranks - 1 - rank) * half + (s - half);
  }
  // Every local position's global one, in local order.
  std::vector<int64_t> positions() const;
  // The same shard seen from another rank of the group.
  ContextShard of_rank(int r) const { return {T, ranks, r}; }
};

}  // namespace parallel
