// The hand-written collective algorithms, each in its own file with its schedule drawn.
// All take a Transport (the communicator and its point-to-point messages) and raw buffers
// as described in comm/backend.hpp. They are what the "ring" and "naive" backends run.
#pragma once

#include <cstddef>
#include <memory>

#include "comm/backend.hpp"
#include "comm/transport.hpp"
#include "comm/types.hpp"

namespace comm::algorithms {

// Ring (bandwidth-optimal for large messages)
std::unique_ptr<PendingOp> start_ring_allreduce(const Transport& t, void* data, std::size_t count, DataType type,
                                                ReduceOp op);
void ring_allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
void ring_reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                         ReduceOp op);
void ring_allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type);
// Asynchronous forms: the reduce-scatter accumulates in `send` itself (no copy).
std::unique_ptr<PendingOp> start_ring_reduce_scatter(const Transport& t, void* send, void* recv, std::size_t count,
                                                     DataType type, ReduceOp op);
std::unique_ptr<PendingOp> start_ring_allgather(const Transport& t, const void* send, void* recv, std::size_t count,
                                                DataType type);

// Binomial trees (log2(n) rounds, latency-optimal)
void tree_broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root);
void tree_reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                 int root);

// Linear: the root talks to every rank directly
void linear_gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root);
void linear_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root);

// Pairwise exchange (all-to-all in n−1 rounds, each rank sending one block per round)
void pairwise_alltoallv(const Transport& t, const void* send, Blocks send_blocks, void* recv, Blocks recv_blocks,
                        DataType type);
void pairwise_alltoall(const Transport& t, const void* send, void* recv, std::size_t count, DataType type);

// Dissemination barrier (log2(n) rounds of empty messages)
void dissemination_barrier(const Transport& t);

// Naive: everything goes through rank 0 (collect, combine, send back) — the baseline.
namespace naive {
void allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
void reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root);
void broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root);
void allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type);
void gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root);
void scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root);
void reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
void barrier(const Transport& t);
}  // namespace naive

}  // namespace comm::algorithms
