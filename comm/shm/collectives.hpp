// The collectives of the ranks of one node, over their NodeGroup (see node_group.hpp).
//
// Small messages go in one shot: every rank copies its part into its staging area, one sync,
// every rank reads what it needs (an allreduce: every rank sums all areas itself, in rank order,
// so all get the same bits). Larger ones repeat that in rounds of an area's size (copy-in), or,
// where the ranks can read each other in place, use single copy:
//
//   allreduce of S bytes, N ranks (block r = elements [rS/N, (r+1)S/N) of the buffer)
//   publish buffers ─ sync ─ rank r reads block r of every peer in place and reduces it, in
//   cache-sized chunks, into its own result; each finished chunk it also writes, from cache,
//   into every peer's result (process_vm_writev) ─ sync (all blocks everywhere; nobody reads
//   our buffers now)
//
// Per rank that moves S read (block r of every rank) and S written (block r into every rank's
// result): 2S, one memcpy's traffic (docs/benchmarks.md).
#pragma once

#include <cstddef>

#include "comm/algorithms/ring_pass.hpp"
#include "comm/backend.hpp"  // Blocks
#include "comm/shm/node_group.hpp"
#include "comm/types.hpp"

namespace comm::shm {

void allreduce(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
void reduce(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root);
void broadcast(NodeGroup& g, void* data, std::size_t count, DataType type, int root);
void allgather(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type);
void gather(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, int root);
void scatter(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, int root);
void reduce_scatter(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
// All-to-all: equal blocks in one shot or rounds of copy-in (small, or where single copy is
// refused), else single copy; any blocks (alltoallv) by single copy only — the caller takes the
// pairwise exchange over MPI where it is refused (every rank decides alike: it is the probe's).
void alltoall(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type);
void alltoallv(NodeGroup& g, const void* send, Blocks send_blocks, void* recv, Blocks recv_blocks, DataType type);

// The two halves of the allreduce, over `layout`'s blocks of a buffer of layout.count elements
// (the hierarchical allreduce puts the network between them). reduce_scatter_blocks leaves
// block rank() of the reduction, not averaged, at `mine`; allgather_blocks copies block r of
// rank r's `buffer` into every rank's `buffer`.
void reduce_scatter_blocks(NodeGroup& g, const void* send, void* mine, algorithms::BlockLayout layout, DataType type,
                           ReduceOp op);
void allgather_blocks(NodeGroup& g, void* buffer, algorithms::BlockLayout layout, DataType type);

}  // namespace comm::shm
