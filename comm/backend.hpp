// The interface every backend implements, over raw buffers.
//
// Counts are elements per rank. `send == recv` means in place. For allgather in place,
// `send` points at this rank's block inside `recv`. A backend runs inside the watchdog's
// scope for the call (Communicator opens it), so all it must do is wait through the
// Transport or watchdog().wait_all — never with a blocking MPI call.
#pragma once

#include <cstddef>
#include <array>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/transport.hpp"
#include "comm/types.hpp"

namespace comm {

// alltoallv's layout of one buffer: block r (for rank r, or from it) is counts[r] elements
// starting at element displs[r]. Both spans hold one entry per rank.
struct Blocks {
  std::span<const std::size_t> counts;
  std::span<const std::size_t> displs;
};

// An operation started but not finished (the asynchronous allreduce, reduce-scatter,
// allgather): MPI requests in flight, a ring halfway round, an NCCL kernel on a stream.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Advances without waiting: completes what has arrived and posts the next messages.
  // Returns true once the whole operation is done.
  virtual bool test() = 0;
  // Until done, polling test() under the watchdog (past the deadline: the report, the end).
  virtual void wait();
  // A receive from any rank, once done: the rank whose message it took (else -1).
  virtual int source() const { return -1; }
  // Withdraws an operation not yet done, where it can be withdrawn (a posted receive); true
  // when it was (it is then done, with nothing received).
  virtual bool cancel() { return false; }
};

// Backends that keep state per communicator (nccl: an ncclComm_t, a CUDA stream, an event)
// say so with per_communicator(), and make it in attach(), which every Communicator then calls
// once when it is made — at start and at split() — on all its ranks together, inside the
// watchdog's scope. The CPU backends keep no state: one object serves every communicator.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // How it moves data on these ranks, where that depends on them (shm: single copy or
  // copy-in, one node or hierarchical); the name otherwise.
  virtual std::string describe() const { return std::string(name()); }
  virtual bool per_communicator() const { return false; }
  // A new backend object bound to the ranks of `group` (only when per_communicator()).
  virtual std::shared_ptr<Backend> attach(const Transport& group);
  // True when the buffers must be device memory (nccl); the others take host memory, and
  // Communicator stages device buffers through pinned host memory for them.
  virtual bool takes_device_memory() const { return false; }

  virtual void allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                         ReduceOp op) = 0;
  // recv is only used on the root.
  virtual void reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                      int root) = 0;
  virtual void broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root) = 0;
  // recv holds size × count elements: rank r's block at r × count.
  virtual void allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) = 0;
  // recv (size × count) is only used on the root.
  virtual void gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) = 0;
  // send (size × count) is only used on the root.
  virtual void scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                       int root) = 0;
  // send holds size × count elements; rank r receives the reduction of block r.
  virtual void reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                              ReduceOp op) = 0;
  virtual void barrier(const Transport& t) = 0;
  // send holds size × count elements: block j goes to rank j, and recv's block i comes from
  // rank i.
  virtual void alltoall(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) = 0;
  // The same with blocks of any size (Blocks above): rank i's send block j is rank j's recv
  // block i, so their counts must agree.
  virtual void alltoallv(const Transport& t, const void* send, Blocks send_blocks, void* recv, Blocks recv_blocks,
                         DataType type) = 0;
  // Point to point; by default over the transport (MPI).
  virtual void send(const Transport& t, const void* data, std::size_t count, DataType type, int dest);
  virtual void recv(const Transport& t, void* data, std::size_t count, DataType type, int source);
  virtual void send_recv(const Transport& t, const void* out, std::size_t out_count, int dest, void* in,
                         std::size_t in_count, int source, DataType type);

  // Starts an in-place allreduce that completes through PendingOp::test(). The default
  // runs it to the end right away: no overlap, but the same results.
  virtual std::unique_ptr<PendingOp> start_allreduce(const Transport& t, void* data, std::size_t count, DataType type,
                                                     ReduceOp op);
  // The same for reduce-scatter and allgather (ZeRO's two collectives). `send` of the
  // reduce-scatter is work space: a backend may leave partial sums in it.
  virtual std::unique_ptr<PendingOp> start_reduce_scatter(const Transport& t, void* send, void* recv, std::size_t count,
                                                          DataType type, ReduceOp op);
  virtual std::unique_ptr<PendingOp> start_allgather(const Transport& t, const void* send, void* recv,
                                                     std::size_t count, DataType type);
};

// The backends, as --backend names them (nccl only in a build with CUDA and NCCL).
enum class BackendKind { mpi, ring, naive, shm, nccl };
inline constexpr std::array<std::string_view, 5> kBackendNames = {"mpi", "ring", "naive", "shm", "nccl"};
constexpr std::string_view name_of(BackendKind kind) { return kBackendNames[static_cast<std::size_t>(kind)]; }

// The names of this build's backends, parsing and making one: comm/backends/registry.hpp.

}  // namespace comm
