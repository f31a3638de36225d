#include "planning/collective_cost.hpp"

#include <algorithm>
#include <cmath>

namespace planning {

std::string name_of(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::ring: return "ring";
    case Algorithm::tree: return "tree";
    case Algorithm::hierarchical: return "hierarchical";
    case Algorithm::point_to_point: return "send/recv";
    case Algorithm::pairwise: return "pairwise";
    case Algorithm::none: break;
  }
  return "none";
}

double ring_allreduce_seconds(int n, double bytes, const Link& link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * link.latency_s + 2.0 * (n - 1) / n * bytes / link.bytes_per_s;
}

double tree_allreduce_seconds(int n, double bytes, const Link& link) {
  if (n <= 1) return 0;
  return 2.0 * std::ceil(std::log2(n)) * link.seconds(bytes);
}

double ring_gather_seconds(int n, double bytes, const Link& link) {
  if (n <= 1) return 0;
  return (n - 1) * link.latency_s + static_cast<double>(n - 1) / n * bytes / link.bytes_per_s;
}

namespace {

CollectiveCost cheaper(CollectiveCost a, CollectiveCost b) { return b.seconds < a.seconds ? b : a; }

// The link a flat algorithm over the whole group runs on: the slow one once it leaves a node.
const Link& flat_link(const GroupShape& group, const Machine& machine) {
  return group.nodes() > 1 ? machine.inter_node : machine.intra_node;
}

}  // namespace

CollectiveCost allreduce_cost(const GroupShape& group, double bytes, const Machine& machine) {
  if (group.size <= 1 || bytes <= 0) return {};
  const Link& link = flat_link(group, machine);
  CollectiveCost best{Algorithm::ring, ring_allreduce_seconds(group.size, bytes, link)};
  best = cheaper(best, {Algorithm::tree, tree_allreduce_seconds(group.size, bytes, link)});
  if (group.nodes() > 1 && group.per_node > 1) {
    const int g = std::min(group.per_node, group.size), k = group.nodes();
    const double across = std::min(ring_allreduce_seconds(k, bytes / g, machine.inter_node),
                                   tree_allreduce_seconds(k, bytes / g, machine.inter_node));
    const double inside = 2 * ring_gather_seconds(g, bytes, machine.intra_node);
    best = cheaper(best, {Algorithm::hierarchical, inside + across});
  }
  return best;
}

CollectiveCost reduce_scatter_cost(const GroupShape& group, double bytes, const Machine& machine) {
  if (group.size <= 1 || bytes <= 0) return {};
  CollectiveCost best{Algorithm::ring, ring_gather_seconds(group.size, bytes, flat_link(group, machine))};
  if (group.nodes() > 1 && group.per_node > 1) {
    const int g = std::min(group.per_node, group.size), k = group.nodes();
    best = cheaper(best, {Algorithm::hierarchical, ring_gather_seconds(g, bytes, machine.intra_node) +
                                                       ring_gather_seconds(k, bytes / g, machine.inter_node)});
  }
  return best;
}

CollectiveCost alltoall_cost(const GroupShape& group, double bytes, const Machine& machine) {
  if (group.size <= 1 || bytes <= 0) return {};
  return {Algorithm::pairwise, ring_gather_seconds(group.size, bytes, flat_link(group, machine))};
}

CollectiveCost send_cost(bool inside_a_node, double bytes, const Machine& machine) {
  if (bytes <= 0) return {};
  return {Algorithm::point_to_point, (inside_a_node ? machine.intra_node : machine.inter_node).seconds(bytes)};
}

}  // namespace planning
