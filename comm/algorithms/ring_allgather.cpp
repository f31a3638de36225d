// Ring allgather: every rank ends with every rank's block, in rank order.
//
//   start   r0: [x0 .  . ]   r1: [ .  x1 . ]   r2: [ .  .  x2]
//   step 0  each sends the block it has to the right:  r0 gets x2, r1 gets x0, r2 gets x1
//   step 1  each forwards the block it just got:       r0 gets x1, r1 gets x2, r2 gets x0
//
// One copy pass of the ring (ring_pass.hpp), received straight into place.
//   messages per rank: n-1      elements sent per rank: (n-1) × count
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/ring_pass.hpp"

namespace comm::algorithms {

std::unique_ptr<PendingOp> start_ring_allgather(const Transport& t, const void* send, void* recv, std::size_t count,
                                                DataType type) {
  const int n = t.size();
  char* mine = at(recv, count * static_cast<std::size_t>(t.rank()), type);
  copy_elements(mine, send, count, type);
  return std::make_unique<RingPass>(t, recv, BlockLayout{count * static_cast<std::size_t>(n), n}, type,
                                    RingPass::Mode::copy, ReduceOp::sum);
}

void ring_allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) {
  start_ring_allgather(t, send, recv, count, type)->wait();
}

}  // namespace comm::algorithms
