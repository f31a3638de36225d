#include "parallel/grid.hpp"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/runtime.hpp"

namespace parallel {

Grid Grid::make(comm::Communicator& world, int dp, int pp, int tp) {
  if (dp < 1 || pp < 1 || tp < 1 || dp * pp * tp != world.size())
    throw comm::UsageError(fmt::format("{} ranks cannot be --dp {} × --pp {} × --tp {} = {}: run D·P·T ranks",
                                       world.size(), dp, pp, tp, dp * pp * tp));
  const int r = world.rank(), d = r / (pp * tp), p = r / tp % pp, t = r % tp;
  // split(color, key): ranks with the same color form a group, ordered by key. Braced
  // initialisation runs the three (collective) splits in this order on every rank.
  return Grid{dp,
              pp,
              tp,
              d,
              p,
              t,
              world.split(r / tp, t),       // tp_group: same (dp, pp)
              world.split(d * tp + t, p),   // pp_group: same (dp, tp)
              world.split(p * tp + t, d)};  // dp_group: same (pp, tp)
}

std::string Grid::describe(int world_rank) const {
  const int d = world_rank / (pp * tp), p = world_rank / tp % pp, t = world_rank % tp;
  if (tp == 1) return fmt::format("rank {} = dp {} · pp {}", world_rank, d, p);
  return fmt::format("rank {} = dp {} · pp {} · tp {}", world_rank, d, p, t);
}

std::string Grid::layout(int world_size) const {
  std::vector<std::string> parts;
  for (int r = 0; r < world_size; ++r) parts.push_back(describe(r));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace parallel
