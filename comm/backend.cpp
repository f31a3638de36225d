#include "comm/backend.hpp"

#include <algorithm>

#include <fmt/ranges.h>

#include "comm/error.hpp"
#include "comm/watchdog/watchdog.hpp"

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
  return {"mpi", "ring", "naive", "shm", "nccl"};
#else
  return {"mpi", "ring", "naive", "shm"};
#endif
}

std::string why_not_a_backend(std::string_view name) {
  const auto built = backend_names();
  if (std::find(built.begin(), built.end(), name) != built.end()) return "";
  if (name == "nccl")
    return fmt::format(
        "backend 'nccl' is not in this build (it has {}): configure with NANODIST_WITH_CUDA=ON where "
        "the CUDA toolkit and NCCL are installed",
        fmt::join(built, ", "));
  return fmt::format("unknown backend '{}' (this build has {})", name, fmt::join(built, ", "));
}

BackendKind parse_backend(std::string_view name) {
  if (const std::string why = why_not_a_backend(name); !why.empty()) throw UsageError(why);
  return static_cast<BackendKind>(std::find(kBackendNames.begin(), kBackendNames.end(), name) - kBackendNames.begin());
}

std::shared_ptr<Backend> make_backend(BackendKind kind) {
  switch (kind) {
    case BackendKind::mpi:
      return make_mpi_backend();
    case BackendKind::ring:
      return make_ring_backend();
    case BackendKind::naive:
      return make_naive_backend();
    case BackendKind::shm:
      return make_shm_backend();
    case BackendKind::nccl:
      break;
  }
#ifdef NANODIST_HAVE_NCCL
  return make_nccl_backend();
#else
  throw UsageError(why_not_a_backend("nccl"));
#endif
}

}  // namespace comm
