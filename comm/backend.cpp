#include "comm/backend.hpp"

#include "comm/error.hpp"
#include "comm/watchdog.hpp"

namespace comm {

namespace {
// What the default start_* return: an operation that is already over.
class FinishedOp : public PendingOp {
 public:
  bool progress() override { return true; }
  std::vector<MPI_Request>& blocked_on() override { return none_; }

 private:
  std::vector<MPI_Request> none_;
};
}  // namespace

std::unique_ptr<PendingOp> Backend::start_allreduce(const Transport& t, void* data, std::size_t count, DataType type,
                                                    ReduceOp op) {
  allreduce(t, data, data, count, type, op);
  return std::make_unique<FinishedOp>();
}

std::unique_ptr<PendingOp> Backend::start_reduce_scatter(const Transport& t, void* send, void* recv, std::size_t count,
                                                         DataType type, ReduceOp op) {
  reduce_scatter(t, send, recv, count, type, op);
  return std::make_unique<FinishedOp>();
}

std::unique_ptr<PendingOp> Backend::start_allgather(const Transport& t, const void* send, void* recv, std::size_t count,
                                                    DataType type) {
  allgather(t, send, recv, count, type);
  return std::make_unique<FinishedOp>();
}

void complete(PendingOp& op) {
  while (!op.progress()) {
    auto& requests = op.blocked_on();
    watchdog().wait_all(static_cast<int>(requests.size()), requests.data());
  }
}

std::vector<std::string> backend_names() { return {"mpi", "ring", "naive"}; }

std::shared_ptr<Backend> make_backend(std::string_view name) {
  if (name == "mpi") return make_mpi_backend();
  if (name == "ring") return make_ring_backend();
  if (name == "naive") return make_naive_backend();
  fail("unknown backend '{}' (expected mpi, ring or naive)", name);
}

}  // namespace comm
