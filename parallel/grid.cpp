#include "parallel/grid.hpp"

#include <fmt/format.h>

#include "comm/runtime.hpp"

namespace parallel {

Grid Grid::make(comm::Communicator& world, int dp) {
  if (dp < 1 || world.size() % dp != 0)
    throw comm::UsageError(fmt::format("--dp {} does not divide the world size {}: run D × P ranks", dp, world.size()));
  const int pp = world.size() / dp, r = world.rank();
  // split(color, key): ranks with the same color form a group, ordered by key.
  return Grid{dp, pp, r / pp, r % pp, world.split(r / pp, r % pp), world.split(r % pp, r / pp)};
}

std::string Grid::describe(int world_rank) const {
  return fmt::format("rank {} = dp {} · pp {}", world_rank, world_rank / pp, world_rank % pp);
}

}  // namespace parallel
