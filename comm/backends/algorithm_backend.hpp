// A backend made of hand-written algorithms over the transport (comm/algorithms/): one
// function per collective, forwarded to. "ring" and "naive" are two such tables.
#pragma once
#include <memory>

#include "comm/algorithms/algorithms.hpp"
#include "comm/backend.hpp"

namespace comm {

struct AlgorithmTable {
  const char* name;
  decltype(&algorithms::ring_allreduce) allreduce;
  decltype(&algorithms::tree_reduce) reduce;
  decltype(&algorithms::tree_broadcast) broadcast;
  decltype(&algorithms::ring_allgather) allgather;
  decltype(&algorithms::linear_gather) gather;
  decltype(&algorithms::linear_scatter) scatter;
  decltype(&algorithms::ring_reduce_scatter) reduce_scatter;
  decltype(&algorithms::dissemination_barrier) barrier;
  decltype(&algorithms::pairwise_alltoall) alltoall;
  decltype(&algorithms::pairwise_alltoallv) alltoallv;
  // Asynchronous forms; null: the Backend's default (completes when started, no overlap).
  decltype(&algorithms::start_ring_allreduce) start_allreduce = nullptr;
  decltype(&algorithms::start_ring_reduce_scatter) start_reduce_scatter = nullptr;
  decltype(&algorithms::start_ring_allgather) start_allgather = nullptr;
};

std::unique_ptr<Backend> make_algorithm_backend(const AlgorithmTable& table);

}  // namespace comm
