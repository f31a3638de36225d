// The thin point-to-point layer every hand-written algorithm is written on.
//
// A Transport is one communicator seen by one algorithm: its rank, its size, and messages
// to and from peers. Every wait goes through the watchdog, so a peer that never answers
// produces a report instead of a hang. Counts are in elements of `type`.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "comm/types.hpp"

namespace comm {

MPI_Datatype mpi_type(DataType t);
MPI_Op mpi_op(ReduceOp op);  // avg has no MPI equivalent: callers use sum, then divide

class Transport {
 public:
  Transport(MPI_Comm comm, int rank, int size, int tag = 0) : comm_(comm), rank_(rank), size_(size), tag_(tag) {}

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm mpi_comm() const { return comm_; }

  // Nonblocking forms: start now, complete in wait_all().
  MPI_Request isend(const void* data, std::size_t count, DataType type, int dest) const;
  MPI_Request irecv(void* data, std::size_t count, DataType type, int source) const;
  // Waits for all (watched); empties the vector. Inside a collective every receive must get
  // exactly what it was posted for: a longer or a shorter message means the ranks called it
  // with different sizes, and the watchdog reports it at once (Watchdog::sizes_disagree).
  void wait_all(std::vector<MPI_Request>& requests) const;
  // The same without waiting (an asynchronous collective's poll): true, and the vector
  // emptied, once all are done.
  bool test_all(std::vector<MPI_Request>& requests) const;

  void send(const void* data, std::size_t count, DataType type, int dest) const;
  void recv(void* data, std::size_t count, DataType type, int source) const;
  // Sends to `dest` and receives from `source` at the same time (the ring step).
  void send_recv(const void* send_data, std::size_t send_count, int dest, void* recv_data, std::size_t recv_count,
                 int source, DataType type) const;

 private:
  // A receive posted and not yet completed: its request, and what it expects.
  struct PostedReceive {
    MPI_Request request;
    std::size_t count;
    DataType type;
  };
  // One look at n requests: true once all are done. Inside a collective a receive that got a
  // longer message (MPI's truncation error) or a shorter one than it was posted for ends the
  // job with the watchdog's report (report_other_size).
  bool poll(int n, MPI_Request* requests) const;
  // Polls until all n are done (watched).
  void wait(int n, MPI_Request* requests) const;
  void report_other_size(const PostedReceive& receive, const MPI_Status& status, bool longer) const;
  // The posted receive of this handle (posted_.end(): a send).
  std::vector<PostedReceive>::iterator posted_receive(MPI_Request handle) const;

  // (mutable: a Transport is one algorithm's view for one call; these are its bookkeeping)
  mutable std::vector<PostedReceive> posted_;  // receives posted, not yet completed
  mutable std::vector<MPI_Request> handles_;   // the last poll's requests as posted, and their statuses
  mutable std::vector<MPI_Status> statuses_;
  MPI_Comm comm_;
  int rank_;
  int size_;
  int tag_;
};

}  // namespace comm
