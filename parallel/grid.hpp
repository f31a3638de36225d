// The ranks of a job as a grid of coordinates (dp, pp), the pipeline stage varying fastest:
//
//   world rank = dp_rank · pp + pp_rank          --dp 2, 4 ranks → pp = 2:
//                                                   rank 0 = dp 0 · pp 0    rank 1 = dp 0 · pp 1
//                                                   rank 2 = dp 1 · pp 0    rank 3 = dp 1 · pp 1
//
// Each rank is in one pipeline (the ranks with its dp_rank: pp_group, which passes
// activations along) and one data-parallel group (the ranks holding the same stage:
// dp_group, which averages that stage's gradients). Both come from Communicator::split.
#pragma once
#include <string>

#include "comm/communicator.hpp"

namespace parallel {

struct Grid {
  int dp = 1, pp = 1;
  int dp_rank = 0, pp_rank = 0;
  comm::Communicator pp_group;
  comm::Communicator dp_group;

  // Throws comm::UsageError when the world size is not a multiple of `dp`.
  static Grid make(comm::Communicator& world, int dp);
  std::string describe(int world_rank) const;  // "rank 3 = dp 1 · pp 1"
};

}  // namespace parallel
