// Binomial-tree broadcast: the number of ranks holding the data doubles every round.
//
// Ranks are renumbered so the root is 0 (v = (rank - root) mod n). In round k, every v < 2^k
// that has the data sends it to v + 2^k:
//
//   8 ranks:  round 0: 0→1     round 1: 0→2, 1→3     round 2: 0→4, 1→5, 2→6, 3→7
//
// A rank receives once, from v minus its lowest set bit, then sends to v + 2^j for each
// smaller power of two.   rounds: ⌈log2 n⌉   messages: n-1 in all, each of the whole buffer.
#include "comm/algorithms/algorithms.hpp"

#include <vector>

namespace comm::algorithms {

void tree_broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root) {
  const int n = t.size();
  const int v = (t.rank() - root + n) % n;
  auto real = [&](int virtual_rank) { return (virtual_rank + root) % n; };

  int mask = 1;
  while (mask < n) {  // find my parent: clear my lowest set bit
    if (v & mask) {
      t.recv(data, count, type, real(v - mask));
      break;
    }
    mask <<= 1;
  }
  std::vector<MPI_Request> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)  // children: v + each smaller power of two
    if (v + mask < n) sends.push_back(t.isend(data, count, type, real(v + mask)));
  t.wait_all(sends);
}

}  // namespace comm::algorithms
