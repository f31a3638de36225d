#include "parallel/dp/zero_shards.hpp"

#include <algorithm>

namespace parallel {

ZeroShards::ZeroShards(const std::vector<std::vector<int>>& groups, const std::vector<nn::NamedTensor>& parameters,
                       int ranks, int rank)
    : ranks_(ranks), rank_(rank) {
  for (const auto& members : groups) {
    Group g;
    for (int p : members) {
      const int64_t n = parameters[static_cast<std::size_t>(p)].tensor.numel();
      g.pieces.push_back({p, g.size, n});
      g.size += n;
    }
    g.shard = (g.size + ranks - 1) / ranks;
    groups_.push_back(std::move(g));
  }
}

void ZeroShards::for_each_overlap(int g, int64_t from, int64_t to, const Visit& visit) const {
  for (const Piece& piece : groups_[static_cast<std::size_t>(g)].pieces) {
    const int64_t first = std::max(from, piece.begin), last = std::min(to, piece.begin + piece.numel);
    if (first < last) visit(piece, first - piece.begin, first, last - first);
  }
}

}  // namespace parallel
