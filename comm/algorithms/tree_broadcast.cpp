// Binomial-tree broadcast: the number of ranks holding the data doubles every round.
//
// Ranks are renumbered so the root is 0 (v = (rank - root) mod n). A rank receives once, from
// v minus its lowest set bit, then sends to v + 2^j for each smaller power of two, the largest
// first; so the root's first message covers the farthest half:
//
//   8 ranks:  round 0: 0→4     round 1: 0→2, 4→6     round 2: 0→1, 2→3, 4→5, 6→7
//
// rounds: ⌈log2 n⌉   messages: n-1 in all, each of the whole buffer.
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
