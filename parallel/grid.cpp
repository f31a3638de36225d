#include "parallel/grid.hpp"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/runtime.hpp"

namespace parallel {

namespace {
struct Coordinates {
  int d, p, k, t;  // dp, pp, cp, tp
};
Coordinates coordinates(int r, int pp, int cp, int tp) { return {r / (pp * cp * tp), r / (cp * tp) % pp, r / tp % cp, r % tp}; }
}  // namespace

Grid Grid::make(comm::Communicator& world, int dp, int pp, int tp, int cp, int ep) {
  const double ranks = static_cast<double>(dp) * pp * cp * tp;  // (four ints' product overflows an int)
  if (dp < 1 || pp < 1 || tp < 1 || cp < 1 || ranks != world.size()) {
    if (cp == 1)
      throw comm::UsageError(fmt::format("{} ranks cannot be --dp {} × --pp {} × --tp {} = {:.0f}: run D·P·T ranks",
                                         world.size(), dp, pp, tp, ranks));
    throw comm::UsageError(fmt::format("{} ranks cannot be --dp {} × --pp {} × --cp {} × --tp {} = {:.0f}: run D·P·C·T "
                                       "ranks",
                                       world.size(), dp, pp, cp, tp, ranks));
  }
  if (ep < 1 || dp % ep != 0)
    throw comm::UsageError(fmt::format("--ep {} does not divide --dp {}: expert-parallel groups are carved from the "
                                       "data-parallel ranks",
                                       ep, dp));
  // (Its groups hold whole experts and whole sequences: the experts' average would otherwise
  // need the cp ranks, and the checkpoint's gather the tp ranks, too.)
  if (ep > 1 && (tp > 1 || cp > 1))
    throw comm::UsageError(fmt::format("--ep {} with --{} {}: expert parallelism runs on whole experts and whole "
                                       "sequences (dp and pp compose with it)",
                                       ep, tp > 1 ? "tp" : "cp", tp > 1 ? tp : cp));
  const auto [d, p, k, t] = coordinates(world.rank(), pp, cp, tp);
  const int place = (p * cp + k) * tp + t;  // the (pp, cp, tp) coordinates the dp ranks share
  // split(color, key): ranks with the same color form a group, ordered by key. Braced
  // initialisation runs the four (collective) splits in this order on every rank.
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
              d % ep,
              world.split(place * (dp / ep) + d / ep, d % ep),  // ep_group
              world.split(place * ep + d % ep, d / ep)};         // expert_dp_group
}

std::string Grid::describe(int world_rank) const {
  const auto [d, p, k, t] = coordinates(world_rank, pp, cp, tp);
  std::string text = fmt::format("rank {} = dp {} · pp {}", world_rank, d, p);
  if (cp > 1) text += fmt::format(" · cp {}", k);
  if (tp > 1) text += fmt::format(" · tp {}", t);
  if (ep > 1) text += fmt::format(" · ep {}", d % ep);  // (its experts: parallel/ep/)
  return text;
}

std::string Grid::layout(int world_size) const {
  std::vector<std::string> parts;
  for (int r = 0; r < world_size; ++r) parts.push_back(describe(r));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace parallel
