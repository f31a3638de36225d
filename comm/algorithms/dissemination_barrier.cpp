// Dissemination barrier: in round k every rank signals rank + 2^k and waits for rank - 2^k.
//
//   4 ranks:  round 0: 0→1 1→2 2→3 3→0      round 1: 0→2 1→3 2→0 3→1
//
// After ⌈log2 n⌉ rounds every rank has heard, directly or through others, from every rank,
// so none can leave before all have arrived. Messages are empty: only their arrival matters.
#include "comm/algorithms/algorithms.hpp"

namespace comm::algorithms {

void dissemination_barrier(const Transport& t) {
  const int n = t.size();
  for (int distance = 1; distance < n; distance <<= 1)
    t.send_recv(nullptr, 0, (t.rank() + distance) % n, nullptr, 0, (t.rank() - distance + n) % n, DataType::i32);
}

}  // namespace comm::algorithms
