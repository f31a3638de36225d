// Backend "ring": the hand-written algorithms over MPI point-to-point messages.
// Rings for the bandwidth-bound collectives, binomial trees for broadcast and reduce,
// linear gather/scatter, a dissemination barrier, the pairwise all-to-all. See comm/algorithms/ and docs/.
// Allreduce, reduce-scatter and allgather also start asynchronously (DP overlap, ZeRO).
#include "comm/backends/algorithm_backend.hpp"
#include "comm/backends/registry.hpp"

namespace comm {

std::unique_ptr<Backend> make_ring_backend() {
  namespace alg = algorithms;
  return make_algorithm_backend({.name = "ring",
                                 .allreduce = alg::ring_allreduce,
                                 .reduce = alg::tree_reduce,
                                 .broadcast = alg::tree_broadcast,
                                 .allgather = alg::ring_allgather,
                                 .gather = alg::linear_gather,
                                 .scatter = alg::linear_scatter,
                                 .reduce_scatter = alg::ring_reduce_scatter,
                                 .barrier = alg::dissemination_barrier,
                                 .alltoall = alg::pairwise_alltoall,
                                 .alltoallv = alg::pairwise_alltoallv,
                                 .start_allreduce = alg::start_ring_allreduce,
                                 .start_reduce_scatter = alg::start_ring_reduce_scatter,
                                 .start_allgather = alg::start_ring_allgather});
}

}  // namespace comm
