// One pass around the ring: the building block of ring reduce-scatter, allgather, allreduce.
//
// The buffer is cut into n blocks (n = ranks). In each of n-1 steps every rank sends one
// block to its right neighbour and receives one from its left, so every link carries data
// all the time. Which block moves is shifted by one per step:
//
//   step k: rank r sends block (r - k - shift) to r+1, receives block (r - k - shift - 1) from r-1
//
//   reduce mode (shift 1): the received block is added into our copy of it. After n-1 steps
//                          rank r holds block r reduced over all ranks (reduce-scatter).
//   copy mode   (shift 0): the received block is stored as it is. Starting from rank r
//                          holding block r, after n-1 steps everyone holds every block (allgather).
//
//   reduce-scatter, 3 ranks, blocks a b c (x_r = rank r's data):
//     start     r0: a0 b0 c0         r1: a1 b1 c1         r2: a2 b2 c2
//     step 0    r0 sends c0→r1       r1 sends a1→r2       r2 sends b2→r0
//               r0: b0+b2            r1: c1+c0            r2: a2+a1
//     step 1    r0 sends b→r1        r1 sends c→r2        r2 sends a→r0
//               r0: a=a0+a1+a2       r1: b=b0+b1+b2       r2: c=c0+c1+c2
//
// Each rank sends (n-1)/n of the buffer per pass, whatever n is: that is why the ring is
// bandwidth-optimal. It is a PendingOp so an allreduce can progress between other work.
//
// Chunking: a step moves its block in segments of at most kSegmentBytes, one after the
// other. In reduce mode each segment lands in a small scratch buffer and is added in while
// it is still in the CPU cache — instead of a block-sized scratch buffer that is written
// to memory and read back. Copy mode receives in place,
// also in segments: measured, that interleaves better when ranks share cores.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/backend.hpp"
#include "comm/transport.hpp"
#include "comm/types.hpp"

namespace comm::algorithms {

// `count` elements cut into `blocks` nearly equal blocks; block b is [begin(b), begin(b+1)).
struct BlockLayout {
  std::size_t count;
  int blocks;
  std::size_t begin(int b) const { return count * static_cast<std::size_t>(b) / static_cast<std::size_t>(blocks); }
  std::size_t size(int b) const { return begin(b + 1) - begin(b); }
};

class RingPass : public PendingOp {
 public:
  enum class Mode { reduce, copy };
  static constexpr std::size_t kSegmentBytes = 1 << 20;  // 1 MiB: measured best of 64 KiB … 4 MiB here

  RingPass(const Transport& t, void* data, BlockLayout layout, DataType type, Mode mode, ReduceOp op);
  bool test() override;

 private:
  int block_sent_at(int step) const;
  std::size_t segments(int block) const;
  void post_segment();

  Transport t_;
  void* data_;
  BlockLayout layout_;
  DataType type_;
  Mode mode_;
  ReduceOp op_;
  std::size_t segment_elements_;
  int step_ = 0;
  std::size_t segment_ = 0;  // within the step
  std::vector<MPI_Request> requests_;
  std::vector<char> scratch_;  // reduce mode: the incoming segment before it is added in
};

}  // namespace comm::algorithms
