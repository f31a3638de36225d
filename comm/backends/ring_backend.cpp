// Backend "ring": the hand-written algorithms over MPI point-to-point messages.
// Rings for the bandwidth-bound collectives, binomial trees for broadcast and reduce,
// linear gather/scatter, a dissemination barrier. See comm/algorithms/ and docs/.
#include "comm/algorithms/algorithms.hpp"
#include "comm/backend.hpp"

namespace comm {
namespace {

namespace alg = algorithms;

class RingBackend : public Backend {
 public:
  std::string_view name() const override { return "ring"; }
  void allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                 ReduceOp op) override {
    alg::ring_allreduce(t, send, recv, count, type, op);
  }
  void reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
              int root) override {
    alg::tree_reduce(t, send, recv, count, type, op, root);
  }
  void broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root) override {
    alg::tree_broadcast(t, data, count, type, root);
  }
  void allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) override {
    alg::ring_allgather(t, send, recv, count, type);
  }
  void gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    alg::linear_gather(t, send, recv, count, type, root);
  }
  void scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    alg::linear_scatter(t, send, recv, count, type, root);
  }
  void reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op) override {
    alg::ring_reduce_scatter(t, send, recv, count, type, op);
  }
  void barrier(const Transport& t) override { alg::dissemination_barrier(t); }
  std::unique_ptr<PendingOp> start_allreduce(const Transport& t, void* data, std::size_t count, DataType type,
                                             ReduceOp op) override {
    return alg::start_ring_allreduce(t, data, count, type, op);
  }
  std::unique_ptr<PendingOp> start_reduce_scatter(const Transport& t, void* send, void* recv, std::size_t count,
                                                  DataType type, ReduceOp op) override {
    return alg::start_ring_reduce_scatter(t, send, recv, count, type, op);
  }
  std::unique_ptr<PendingOp> start_allgather(const Transport& t, const void* send, void* recv, std::size_t count,
                                             DataType type) override {
    return alg::start_ring_allgather(t, send, recv, count, type);
  }
};

}  // namespace

std::unique_ptr<Backend> make_ring_backend() { return std::make_unique<RingBackend>(); }

}  // namespace comm
