// What went through a communicator (Communicator::traffic()), and the bytes it means per rank.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/types.hpp"

namespace comm {

// What went through a communicator, per kind of call: how many calls and how many bytes of
// buffer — the whole buffer a collective reduces or assembles (for reduce_scatter, allgather,
// gather and scatter: size() × the per-rank count), a rank's whole send buffer for alltoall and
// alltoallv, the message of a send or receive.
struct Traffic {
  std::int64_t calls = 0;
  double bytes = 0;
};
using TrafficByKind = std::array<Traffic, kOpKinds>;

// The ring-optimal bytes each rank sends for these calls on n ranks (nccl-tests' bus
// convention): allreduce 2(n−1)/n of its buffer, reduce_scatter/allgather (n−1)/n,
// broadcast/reduce 1 (a pipelined tree or chain), gather/scatter/alltoall(v) (n−1)/n, sends 1.
double bytes_sent_per_rank(const TrafficByKind& traffic, int n);
// One call's bytes as counted: count elements of `type`, times the group's `ranks` for the calls
// whose count is per rank (reduce-scatter, allgather, gather, scatter, all-to-all).
double call_bytes(OpKind kind, std::size_t count, DataType type, int ranks);
// "6 reduce_scatter (41.0 MiB), 6 allgather (41.0 MiB)": the kinds with calls.
std::string describe(const TrafficByKind& traffic);
TrafficByKind operator-(const TrafficByKind& later, const TrafficByKind& earlier);

}  // namespace comm
