#include "comm/backend.hpp"

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

}  // namespace comm
