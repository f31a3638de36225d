// Linear gather and scatter: the root exchanges one message with every other rank.
//
//   gather (root 0):   r1 ──x1──▶ r0 ◀──x2── r2        scatter is the same, arrows reversed:
//                             ▲                        the root sends block r to rank r.
//                            x3
//                             │
//                             r3
//
// The root posts all n-1 receives (or sends) at once, so the messages travel in parallel
// and the root's link is the bottleneck: n-1 messages through it, (n-1) × count elements.
// Every rank needs its block from (or to) the root anyway, so for large messages no tree
// does better on one machine.
#include <cstring>
#include <vector>

#include "comm/algorithms/algorithms.hpp"

namespace comm::algorithms {

void linear_gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) {
  if (t.rank() != root) {
    t.send(send, count, type, root);
    return;
  }
  std::vector<MPI_Request> receives;
  for (int r = 0; r < t.size(); ++r)
    if (r != root) receives.push_back(t.irecv(at(recv, count * static_cast<std::size_t>(r), type), count, type, r));
  char* mine = at(recv, count * static_cast<std::size_t>(root), type);
  copy_elements(mine, send, count, type);
  t.wait_all(receives);
}

void linear_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) {
  if (t.rank() != root) {
    t.recv(recv, count, type, root);
    return;
  }
  std::vector<MPI_Request> sends;
  for (int r = 0; r < t.size(); ++r)
    if (r != root) sends.push_back(t.isend(at(send, count * static_cast<std::size_t>(r), type), count, type, r));
  const char* mine = at(send, count * static_cast<std::size_t>(root), type);
  copy_elements(recv, mine, count, type);
  t.wait_all(sends);
}

}  // namespace comm::algorithms
