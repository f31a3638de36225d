// Backend "naive": every collective goes through rank 0 (comm/algorithms/naive.cpp) — but the
// all-to-all, which has nothing to combine there: the pairwise exchange, as the ring backend.
// Its asynchronous collectives are the default ones: they complete when started (no overlap).
#include "comm/backends/algorithm_backend.hpp"
#include "comm/backends/registry.hpp"

namespace comm {

std::unique_ptr<Backend> make_naive_backend() {
  namespace naive = algorithms::naive;
  return make_algorithm_backend({.name = "naive",
                                 .allreduce = naive::allreduce,
                                 .reduce = naive::reduce,
                                 .broadcast = naive::broadcast,
                                 .allgather = naive::allgather,
                                 .gather = naive::gather,
                                 .scatter = naive::scatter,
                                 .reduce_scatter = naive::reduce_scatter,
                                 .barrier = naive::barrier,
                                 // nothing to combine at rank 0: the pairwise exchange
                                 .alltoall = algorithms::pairwise_alltoall,
                                 .alltoallv = algorithms::pairwise_alltoallv});
}

}  // namespace comm
