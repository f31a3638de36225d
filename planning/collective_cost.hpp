// What a collective costs in the α–β model (docs/planning.md, docs/allreduce.md): each step
// of an algorithm sends one message, α + bytes/bandwidth, and the algorithms differ in how
// many steps they take and how much each carries. For S bytes on n ranks over one link:
//
//   ring allreduce        2(n−1) steps of S/n          2(n−1)·α + 2(n−1)/n · S/bw
//   tree allreduce        2⌈log₂n⌉ steps of S          2⌈log₂n⌉·(α + S/bw)  (reduce, then broadcast)
//   ring reduce-scatter   (n−1) steps of S/n           (n−1)·α + (n−1)/n · S/bw   (S: the whole buffer)
//   ring allgather        the same
//   pairwise all-to-all   (n−1) steps of S/n           (n−1)·α + (n−1)/n · S/bw   (S: what a rank sends
//                                                       and keeps, docs/alltoall.md)
//   send/recv             one message                  α + S/bw
//
// The tree wins for small S (fewer α), the ring for large S (each byte crosses once). Across
// nodes the hierarchical allreduce (comm/backends' node groups, docs/backends.md) reduces
// inside each node first, so only 1/g of the buffer crosses the slow link per rank:
//   reduce-scatter inside the node (g ranks), allreduce of S/g across the k nodes, allgather inside.
// bw is the bus bandwidth, the figure nccl-tests and comm_bench report: ring allreduce's
// time is 2(n−1)/n · S/busbw at large S.
#pragma once
#include <string>

#include "planning/machine.hpp"

namespace planning {

// How the ranks of a group sit on the machine's nodes: `size` ranks, at most `per_node` of them
// on each node they use (per_node ≥ size: one node; per_node == 1: one a node).
struct GroupShape {
  int size = 1;
  int per_node = 1;
  int nodes() const { return (size + per_node - 1) / per_node; }
};

enum class Algorithm { none, ring, tree, hierarchical, point_to_point, pairwise };
std::string name_of(Algorithm algorithm);

struct CollectiveCost {
  Algorithm algorithm = Algorithm::none;
  double seconds = 0;
};

double ring_allreduce_seconds(int n, double bytes, const Link& link);
double tree_allreduce_seconds(int n, double bytes, const Link& link);
double ring_gather_seconds(int n, double bytes, const Link& link);  // reduce-scatter or allgather of `bytes` in all

// The cheapest algorithm for the group's shape (a group of one costs nothing).
CollectiveCost allreduce_cost(const GroupShape& group, double bytes, const Machine& machine);
CollectiveCost reduce_scatter_cost(const GroupShape& group, double bytes, const Machine& machine);
// The same steps backwards, so the same cost.
inline CollectiveCost allgather_cost(const GroupShape& group, double bytes, const Machine& machine) {
  return reduce_scatter_cost(group, bytes, machine);
}
// The pairwise exchange: every step crosses the group's slowest link (no hierarchy).
CollectiveCost alltoall_cost(const GroupShape& group, double bytes, const Machine& machine);
CollectiveCost send_cost(bool inside_a_node, double bytes, const Machine& machine);

}  // namespace planning
