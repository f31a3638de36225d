// Ring reduce-scatter: rank r ends with block r of the sum over all ranks.
//
// send holds n blocks of `count` elements. One reduce pass of the ring (ring_pass.hpp):
// n-1 steps, each sending one block right and adding the block received from the left.
//   messages per rank: n-1      elements sent per rank: (n-1) × count
#include <cstring>
#include <vector>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/ring_pass.hpp"
#include "comm/reduce_kernels.hpp"

namespace comm::algorithms {
namespace {

// The pass accumulates in `work` (n blocks), then block r goes to recv and is averaged.
class RingReduceScatter : public PendingOp {
 public:
  RingReduceScatter(const Transport& t, void* work, void* recv, std::size_t count, DataType type, ReduceOp op)
      : t_(t),
        work_(work),
        recv_(recv),
        count_(count),
        type_(type),
        op_(op),
        pass_(t, work, BlockLayout{count * static_cast<std::size_t>(t.size()), t.size()}, type, RingPass::Mode::reduce,
              op) {}

  bool test() override {
    if (done_) return true;
    if (!pass_.test()) return false;
    copy_elements(recv_, at(work_, count_ * static_cast<std::size_t>(t_.rank()), type_), count_, type_);
    if (count_ > 0) finish_average(recv_, count_, type_, op_, t_.size());
    return done_ = true;
  }

 private:
  Transport t_;
  void* work_;
  void* recv_;
  std::size_t count_;
  DataType type_;
  ReduceOp op_;
  RingPass pass_;
  bool done_ = false;
};

}  // namespace

void ring_reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                         ReduceOp op) {
  // The pass accumulates in place, and `send` is read-only: work on a copy. The copy's
  // buffer is kept between calls — allocating hundreds of MB each time costs page faults.
  thread_local std::vector<char> work;
  const std::size_t bytes = count * static_cast<std::size_t>(t.size()) * size_of(type);
  if (work.size() < bytes + 1) work.resize(bytes + 1);
  copy_elements(work.data(), send, count * static_cast<std::size_t>(t.size()), type);
  RingReduceScatter ring(t, work.data(), recv, count, type, op);
  ring.wait();
}

std::unique_ptr<PendingOp> start_ring_reduce_scatter(const Transport& t, void* send, void* recv, std::size_t count,
                                                     DataType type, ReduceOp op) {
  return std::make_unique<RingReduceScatter>(t, send, recv, count, type, op);  // accumulates in send itself
}

}  // namespace comm::algorithms
