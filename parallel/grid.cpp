#include "parallel/grid.hpp"

#include <array>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/runtime.hpp"

namespace parallel {
namespace {

// A rank's place in its ep group: dp rank within the group, then tp rank (the tp ranks folded in).
int ep_rank_of(int dp_rank, int tp_rank, int ep, int tp) { return (dp_rank % ep) * tp + tp_rank; }

}  // namespace

Grid Grid::make(comm::Communicator& world, const Layout& layout) {
  layout.check(world.size());
  const auto [dp, pp, cp, tp, ep] = std::array{layout.dp, layout.pp, layout.cp, layout.tp, layout.ep};
  const auto [d, p, k, t] = layout.place_of(world.rank());
  // The experts' group: ep consecutive dp ranks with all their tp ranks folded in (the tp ranks
  // of a replica hold different experts: parallel/ep/tensor_parallel_folding.hpp), dp rank then
  // tp rank, one per cp rank; expert-dp: the same place in every other such group, every cp
  // rank's too (the cp ranks of a replica hold the same experts, as they hold the same weights).
  const int ep_rank = ep_rank_of(d, t, ep, tp);
  // split(color, key): ranks with the same color form a group, ordered by key. Braced
  // initialisation runs the (collective) splits in this order on every rank.
  return Grid{dp,
              pp,
              cp,
              tp,
              d,
              p,
              k,
              t,
              world.split(world.rank() / tp, t),       // tp_group: same (dp, pp, cp)
              world.split((d * pp + p) * tp + t, k),   // cp_group: same (dp, pp, tp)
              world.split((d * cp + k) * tp + t, p),   // pp_group: same (dp, cp, tp)
              world.split(p * tp + t, d * cp + k),     // dp_group: same (pp, tp)
              ep,
              ep_rank,
              world.split((p * cp + k) * (dp / ep) + d / ep, ep_rank),  // ep_group: same (pp, cp)
              world.split((p * tp + t) * ep + d % ep, (d / ep) * cp + k),  // expert_dp_group
              world.split(d < ep && k == 0 ? 0 : 1, p * ep * tp + ep_rank)};  // checkpoint_group
}

std::string Grid::describe(int world_rank) const {
  const auto [d, p, k, t] = Layout{.dp = dp, .pp = pp, .cp = cp, .tp = tp}.place_of(world_rank);
  std::string text = fmt::format("rank {} = dp {} · pp {}", world_rank, d, p);
  if (cp > 1) text += fmt::format(" · cp {}", k);
  if (tp > 1) text += fmt::format(" · tp {}", t);
  if (ep > 1) text += fmt::format(" · ep {}", ep_rank_of(d, t, ep, tp));  // (its experts: parallel/ep/)
  return text;
}

std::string Grid::layout(int world_size) const {
  std::vector<std::string> parts;
  for (int r = 0; r < world_size; ++r) parts.push_back(describe(r));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace parallel
