#include "comm/backend.hpp"

#include <fmt/ranges.h>

#include "comm/error.hpp"
#include "comm/watchdog.hpp"

namespace comm {

namespace {
// What the default start_* return: an operation that is already over.
class FinishedOp : public PendingOp {
 public:
  bool test() override { return true; }
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

void PendingOp::wait() {
  watchdog().wait_until([&] { return test(); });
}

std::shared_ptr<Backend> Backend::attach(const Transport&) {
  fail("internal error: backend '{}' keeps no per-communicator state to attach", name());
}

void Backend::send(const Transport& t, const void* data, std::size_t count, DataType type, int dest) {
  t.send(data, count, type, dest);
}

void Backend::recv(const Transport& t, void* data, std::size_t count, DataType type, int source) {
  t.recv(data, count, type, source);
}

void Backend::send_recv(const Transport& t, const void* out, std::size_t out_count, int dest, void* in,
                        std::size_t in_count, int source, DataType type) {
  t.send_recv(out, out_count, dest, in, in_count, source, type);
}

std::vector<std::string> backend_names() {
#ifdef NANODIST_HAVE_NCCL
  return {"mpi", "ring", "naive", "nccl"};
#else
  return {"mpi", "ring", "naive"};
#endif
}

std::shared_ptr<Backend> make_backend(std::string_view name) {
  if (name == "mpi") return make_mpi_backend();
  if (name == "ring") return make_ring_backend();
  if (name == "naive") return make_naive_backend();
#ifdef NANODIST_HAVE_NCCL
  if (name == "nccl") return make_nccl_backend();
#else
  if (name == "nccl")
    fail("backend 'nccl' is not in this build (it has mpi, ring, naive): build where the CUDA toolkit and NCCL are "
         "installed");
#endif
  fail("unknown backend '{}' (this build has {})", name, fmt::join(backend_names(), ", "));
}

}  // namespace comm
