// Ring allreduce = ring reduce-scatter, then ring allgather, on the same buffer.
//
//   n ranks, buffer cut into n blocks           after reduce-scatter        after allgather
//   r0: [a0 b0 c0]                              r0: [A  .  . ]              r0: [A B C]
//   r1: [a1 b1 c1]   --- n-1 reduce steps --->  r1: [ .  B  . ]  -- n-1 --> r1: [A B C]
//   r2: [a2 b2 c2]                              r2: [ .  .  C ]   copies    r2: [A B C]
//   (A = a0+a1+a2, ...)
//
// Cost per rank: 2(n-1) messages and 2(n-1)/n × the buffer sent — independent of n for
// large buffers, which is why every large-scale allreduce is a ring or a variant of it.
// See ring_pass.hpp for one pass. The average is divided on the rank's own reduced block,
// before the allgather, so each element is divided once.
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/ring_pass.hpp"
#include "comm/reduce_kernels.hpp"

namespace comm::algorithms {
namespace {

class RingAllreduce : public PendingOp {
 public:
  RingAllreduce(const Transport& t, void* data, std::size_t count, DataType type, ReduceOp op)
      : t_(t),
        data_(data),
        layout_{count, t.size()},
        type_(type),
        op_(op),
        reduce_scatter_(t, data, layout_, type, RingPass::Mode::reduce, op),
        allgather_(t, data, layout_, type, RingPass::Mode::copy, op) {}

  bool test() override {
    if (!reduced_) {
      if (!reduce_scatter_.test()) return false;
      const int mine = t_.rank();
      finish_average(at(data_, layout_.begin(mine), type_), layout_.size(mine), type_, op_, t_.size());
      reduced_ = true;
    }
    return allgather_.test();
  }

 private:
  Transport t_;
  void* data_;
  BlockLayout layout_;
  DataType type_;
  ReduceOp op_;
  RingPass reduce_scatter_;
  RingPass allgather_;
  bool reduced_ = false;
};

}  // namespace

std::unique_ptr<PendingOp> start_ring_allreduce(const Transport& t, void* data, std::size_t count, DataType type,
                                                ReduceOp op) {
  return std::make_unique<RingAllreduce>(t, data, count, type, op);
}

void ring_allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  copy_elements(recv, send, count, type);
  RingAllreduce ring(t, recv, count, type, op);
  ring.wait();
}

}  // namespace comm::algorithms
