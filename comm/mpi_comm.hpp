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

}  // namespace comm
