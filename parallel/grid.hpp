// The ranks of a job as a grid of coordinates (dp, pp, tp), tensor-parallel rank fastest:
//
//   world rank = (dp_rank · pp + pp_rank) · tp + tp_rank
//
//   --dp 2 --pp 2 --tp 2, 8 ranks:   rank 0 = dp 0 · pp 0 · tp 0    rank 1 = dp 0 · pp 0 · tp 1
//                                    rank 2 = dp 0 · pp 1 · tp 0    rank 3 = dp 0 · pp 1 · tp 1
//                                    rank 4 = dp 1 · pp 0 · tp 0    …
//
// Why this order: tensor-parallel ranks talk most (two all-reduces of every block's
// activations, forward and backward), so they are neighbours — on one node, ideally one
// NVLink island; pipeline neighbours exchange one activation per micro-batch; data-parallel
// replicas only meet once per step, for the gradients. Each rank is in three groups, each
// from Communicator::split: tp_group (same dp, pp: one stage's tensor-parallel ranks),
// pp_group (same dp, tp: one pipeline, passing activations along) and dp_group (same pp, tp:
// the replicas of the same shard, averaging its gradients).
#pragma once
#include <string>

#include "comm/communicator.hpp"

namespace parallel {

struct Grid {
  int dp = 1, pp = 1, tp = 1;
  int dp_rank = 0, pp_rank = 0, tp_rank = 0;
  comm::Communicator tp_group;
  comm::Communicator pp_group;
  comm::Communicator dp_group;

  // Throws comm::UsageError naming the sizes when the world size is not dp · pp · tp.
  static Grid make(comm::Communicator& world, int dp, int pp, int tp);
  // "rank 5 = dp 1 · pp 0 · tp 1"; without the tp part when tp = 1 ("rank 3 = dp 1 · pp 1").
  std::string describe(int world_rank) const;
  // Every rank, comma-separated, for the log's "layout:" line.
  std::string layout(int world_size) const;
};

}  // namespace parallel
