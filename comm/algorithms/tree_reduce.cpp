// Binomial-tree reduce: the broadcast tree run backwards, adding on the way up.
//
// With v = (rank - root) mod n, in round k every v with bit k set sends its partial result
// to v - 2^k and drops out; the others add what they receive from v + 2^k.
//
//   8 ranks:  round 0: 1→0, 3→2, 5→4, 7→6     round 1: 2→0, 6→4     round 2: 4→0
//
//   rounds: ⌈log2 n⌉   messages: n-1 in all, each of the whole buffer.
#include <cstring>
#include <vector>

#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce_kernels.hpp"

namespace comm::algorithms {

void tree_reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                 int root) {
  const int n = t.size();
  const int v = (t.rank() - root + n) % n;
  auto real = [&](int virtual_rank) { return (virtual_rank + root) % n; };
  const std::size_t bytes = count * size_of(type);

  // The partial result: in recv on the root, in a scratch buffer elsewhere.
  std::vector<char> scratch(t.rank() == root ? 1 : bytes + 1);
  void* partial = t.rank() == root ? recv : scratch.data();
  copy_elements(partial, send, count, type);
  std::vector<char> incoming(bytes + 1);

  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      t.send(partial, count, type, real(v - mask));
      return;
    }
    if (v + mask < n) {
      t.recv(incoming.data(), count, type, real(v + mask));
      reduce_into(partial, incoming.data(), count, type, op);
    }
  }
  finish_average(partial, count, type, op, n);  // only the root gets here
}

}  // namespace comm::algorithms
