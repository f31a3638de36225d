// All-to-all by pairwise exchange: every rank has a block for every rank (its own included),
// and every rank ends with the blocks meant for it, in rank order — a transpose of the ranks'
// blocks. "ij" below is rank i's block for rank j.
//
//   before      r0: 00 01 02 03   r1: 10 11 12 13   r2: 20 21 22 23   r3: 30 31 32 33
//   after       r0: 00 10 20 30   r1: 01 11 21 31   r2: 02 12 22 32   r3: 03 13 23 33
//
// n−1 rounds. In round k every rank r sends its block for rank r+k (mod n) and receives, at
// the same time, the block rank r−k (mod n) has for it; its own block it copies:
//
//   round 1:  r0 ─01─▶ r1 ─12─▶ r2 ─23─▶ r3 ─30─▶ r0        everyone one step ahead
//   round 2:  r0 ─02─▶ r2 ─20─▶ r0     r1 ─13─▶ r3 ─31─▶ r1   two steps
//   round 3:  r0 ─03─▶ r3 ─32─▶ r2 ─21─▶ r1 ─10─▶ r0        three (one step back)
//
// Every rank sends one block and receives one in every round, so no link idles and no rank
// waits for two: with blocks of m bytes, (n−1)(α + m/β) — each byte that must leave its rank
// leaves once (the bandwidth optimum), in n−1 latencies (Bruck's algorithm takes log2 n rounds
// but forwards blocks through others: more bytes, better only for tiny blocks). Blocks may
// have any size (alltoallv): a round's pair exchanges what one has for the other.
#include <vector>

#include "comm/algorithms/algorithms.hpp"

namespace comm::algorithms {

void pairwise_alltoallv(const Transport& t, const void* send, Blocks send_blocks, void* recv, Blocks recv_blocks,
                        DataType type) {
  const int n = t.size(), me = t.rank();
  const auto mine = static_cast<std::size_t>(me);
  copy_elements(at(recv, recv_blocks.displs[mine], type), at(send, send_blocks.displs[mine], type),
                send_blocks.counts[mine], type);
  for (int round = 1; round < n; ++round) {
    const auto to = static_cast<std::size_t>((me + round) % n);
    const auto from = static_cast<std::size_t>((me - round + n) % n);
    t.send_recv(at(send, send_blocks.displs[to], type), send_blocks.counts[to], static_cast<int>(to),
                at(recv, recv_blocks.displs[from], type), recv_blocks.counts[from], static_cast<int>(from), type);
  }
}

void pairwise_alltoall(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) {
  const auto n = static_cast<std::size_t>(t.size());
  const std::vector<std::size_t> counts(n, count);
  std::vector<std::size_t> displs(n);
  for (std::size_t r = 0; r < n; ++r) displs[r] = r * count;
  const Blocks blocks{counts, displs};
  pairwise_alltoallv(t, send, blocks, recv, blocks, type);
}

}  // namespace comm::algorithms
