// Ring reduce-scatter: rank r ends with block r of the sum over all ranks.
//
// send holds n blocks of `count` elements. One reduce pass of the ring (ring_pass.hpp):
// n-1 steps, each sending one block right and adding the block received from the left.
//   messages per rank: n-1      elements sent per rank: (n-1) × count
#include <cstring>
#include <vector>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/ring_pass.hpp"
#include "comm/reduce_kernels.hpp"

namespace comm::algorithms {

void ring_reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                         ReduceOp op) {
  const int n = t.size();
  // The pass accumulates in place, and `send` is read-only: work on a copy. The copy's
  // buffer is kept between calls — allocating hundreds of MB each time costs page faults.
  thread_local std::vector<char> work;
  const std::size_t bytes = count * static_cast<std::size_t>(n) * size_of(type);
  if (work.size() < bytes + 1) work.resize(bytes + 1);
  if (bytes > 0) std::memcpy(work.data(), send, bytes);
  RingPass pass(t, work.data(), BlockLayout{count * static_cast<std::size_t>(n), n}, type, RingPass::Mode::reduce, op);
  complete(pass);
  if (count > 0)  // recv may be null when count is 0 (memcpy must not be given null, even for 0 bytes)
    std::memcpy(recv, at(work.data(), count * static_cast<std::size_t>(t.rank()), type), count * size_of(type));
  finish_average(recv, count, type, op, n);
}

}  // namespace comm::algorithms
