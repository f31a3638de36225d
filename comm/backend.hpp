// The interface every backend implements, over raw buffers.
//
// Counts are elements per rank. `send == recv` means in place. For allgather in place,
// `send` points at this rank's block inside `recv`. A backend runs inside the watchdog's
// scope for the call (Communicator opens it), so all it must do is wait through the
// Transport or watchdog().wait_all — never with a blocking MPI call.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/transport.hpp"
#include "comm/types.hpp"

namespace comm {

// An operation started but not finished (the asynchronous allreduce, reduce-scatter, allgather).
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Advances without waiting: completes what has arrived and posts the next messages.
  // Returns true once the whole operation is done.
  virtual bool progress() = 0;
  // The requests it is blocked on when progress() returned false.
  virtual std::vector<MPI_Request>& blocked_on() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

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

  // Starts an in-place allreduce that completes through PendingOp::progress(). The default
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

// "mpi", "ring" or "naive"; throws comm::Error naming the choices for anything else.
std::shared_ptr<Backend> make_backend(std::string_view name);
std::vector<std::string> backend_names();

std::unique_ptr<Backend> make_mpi_backend();
std::unique_ptr<Backend> make_ring_backend();
std::unique_ptr<Backend> make_naive_backend();

// Runs a pending operation to completion, waiting through the watchdog.
void complete(PendingOp& op);

}  // namespace comm
