// Owns one MPI communicator handle: freed on destruction unless it is MPI_COMM_WORLD.
#pragma once

#include <mpi.h>

#include <utility>

namespace comm {

class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm c) : comm_(c) {}
  MpiComm(MpiComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& o) noexcept {
    std::swap(comm_, o.comm_);
    return *this;
  }
  ~MpiComm() {
    if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// The job's world, which the status board indexes: MPI_COMM_WORLD when mpiexec started the
// ranks; the PyTorch backend (torch_backend/) joins processes started apart (torchrun, spawned
// tests, each an MPI world of one) into one communicator and names it here.
inline MPI_Comm& job_world() {
  static MPI_Comm world = MPI_COMM_WORLD;
  return world;
}

}  // namespace comm
