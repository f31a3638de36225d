// Backend "naive": every collective goes through rank 0 (comm/algorithms/naive.cpp).
// Its asynchronous collectives are the default ones: they complete when started (no overlap).
#include "comm/algorithms/algorithms.hpp"
#include "comm/backend.hpp"

namespace comm {
namespace {

namespace naive = algorithms::naive;

class NaiveBackend : public Backend {
 public:
  std::string_view name() const override { return "naive"; }
  void allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                 ReduceOp op) override {
    naive::allreduce(t, send, recv, count, type, op);
  }
  void reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
              int root) override {
    naive::reduce(t, send, recv, count, type, op, root);
  }
  void broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root) override {
    naive::broadcast(t, data, count, type, root);
  }
  void allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) override {
    naive::allgather(t, send, recv, count, type);
  }
  void gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    naive::gather(t, send, recv, count, type, root);
  }
  void scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    naive::scatter(t, send, recv, count, type, root);
  }
  void reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op) override {
    naive::reduce_scatter(t, send, recv, count, type, op);
  }
  void barrier(const Transport& t) override { naive::barrier(t); }
};

}  // namespace

std::unique_ptr<Backend> make_naive_backend() { return std::make_unique<NaiveBackend>(); }

}  // namespace comm
