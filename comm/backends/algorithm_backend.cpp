#include "comm/backends/algorithm_backend.hpp"

namespace comm {
namespace {

class AlgorithmBackend final : public Backend {
 public:
  explicit AlgorithmBackend(const AlgorithmTable& table) : a_(table) {}
  std::string_view name() const override { return a_.name; }
  void allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                 ReduceOp op) override {
    a_.allreduce(t, send, recv, count, type, op);
  }
  void reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
              int root) override {
    a_.reduce(t, send, recv, count, type, op, root);
  }
  void broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root) override {
    a_.broadcast(t, data, count, type, root);
  }
  void allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) override {
    a_.allgather(t, send, recv, count, type);
  }
  void gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    a_.gather(t, send, recv, count, type, root);
  }
  void scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    a_.scatter(t, send, recv, count, type, root);
  }
  void reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op) override {
    a_.reduce_scatter(t, send, recv, count, type, op);
  }
  void barrier(const Transport& t) override { a_.barrier(t); }
  void alltoall(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) override {
    a_.alltoall(t, send, recv, count, type);
  }
  void alltoallv(const Transport& t, const void* send, Blocks send_blocks, void* recv, Blocks recv_blocks,
                 DataType type) override {
    a_.alltoallv(t, send, send_blocks, recv, recv_blocks, type);
  }
  std::unique_ptr<PendingOp> start_allreduce(const Transport& t, void* data, std::size_t count, DataType type,
                                             ReduceOp op) override {
    if (!a_.start_allreduce) return Backend::start_allreduce(t, data, count, type, op);
    return a_.start_allreduce(t, data, count, type, op);
  }
  std::unique_ptr<PendingOp> start_reduce_scatter(const Transport& t, void* send, void* recv, std::size_t count,
                                                  DataType type, ReduceOp op) override {
    if (!a_.start_reduce_scatter) return Backend::start_reduce_scatter(t, send, recv, count, type, op);
    return a_.start_reduce_scatter(t, send, recv, count, type, op);
  }
  std::unique_ptr<PendingOp> start_allgather(const Transport& t, const void* send, void* recv, std::size_t count,
                                             DataType type) override {
    if (!a_.start_allgather) return Backend::start_allgather(t, send, recv, count, type);
    return a_.start_allgather(t, send, recv, count, type);
  }

 private:
  AlgorithmTable a_;
};

}  // namespace

std::unique_ptr<Backend> make_algorithm_backend(const AlgorithmTable& table) {
  return std::make_unique<AlgorithmBackend>(table);
}

}  // namespace comm
