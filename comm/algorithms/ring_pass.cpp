#include "comm/algorithms/ring_pass.hpp"

#include <algorithm>
#include <utility>

#include "comm/algorithms/algorithms.hpp"
#include "comm/error.hpp"
#include "comm/reduce_kernels.hpp"

namespace comm::algorithms {

RingPass::RingPass(const Transport& t, void* data, BlockLayout layout, DataType type, Mode mode, ReduceOp op)
    : t_(t),
      data_(data),
      layout_(layout),
      type_(type),
      mode_(mode),
      op_(op),
      segment_elements_(std::max<std::size_t>(1, kSegmentBytes / size_of(type))) {
  if (mode_ == Mode::reduce)
    scratch_.resize(std::min(layout_.size(layout_.blocks - 1), segment_elements_) * size_of(type_) + 1);
}

int RingPass::block_sent_at(int step) const {
  const int n = t_.size();
  const int shift = mode_ == Mode::reduce ? 1 : 0;
  return ((t_.rank() - step - shift) % n + 2 * n) % n;
}

std::size_t RingPass::segments(int block) const {
  return std::max<std::size_t>(1, (layout_.size(block) + segment_elements_ - 1) / segment_elements_);
}

// Posts segment `segment_` of this step: send it from the outgoing block, receive it for the incoming one.
void RingPass::post_segment() {
  const int n = t_.size();
  const int out = block_sent_at(step_);
  const int in = (out + n - 1) % n;
  const std::size_t segment_size = segment_elements_;
  auto part = [&](int block) {  // [first element, count) of this segment of `block`
    const std::size_t first = std::min(segment_ * segment_size, layout_.size(block));
    return std::pair{layout_.begin(block) + first, std::min(segment_size, layout_.size(block) - first)};
  };
  if (segment_ < segments(in)) {
    auto [first, count] = part(in);
    void* into = mode_ == Mode::reduce ? scratch_.data() : at(data_, first, type_);
    requests_.push_back(t_.irecv(into, count, type_, (t_.rank() + n - 1) % n));
  }
  if (segment_ < segments(out)) {
    auto [first, count] = part(out);
    requests_.push_back(t_.isend(at(data_, first, type_), count, type_, (t_.rank() + 1) % n));
  }
}

bool RingPass::test() {
  const int steps = t_.size() - 1;
  while (step_ < steps) {
    if (requests_.empty()) post_segment();
    if (!t_.test_all(requests_)) return false;
    const int in = (block_sent_at(step_) + t_.size() - 1) % t_.size();
    if (mode_ == Mode::reduce && segment_ < segments(in)) {
      const std::size_t first = segment_ * segment_elements_;
      const std::size_t count = std::min(segment_elements_, layout_.size(in) - std::min(first, layout_.size(in)));
      reduce_into(at(data_, layout_.begin(in) + first, type_), scratch_.data(), count, type_, op_);
    }
    if (++segment_ >= std::max(segments(in), segments(block_sent_at(step_)))) {
      segment_ = 0;
      ++step_;
    }
  }
  return true;
}

}  // namespace comm::algorithms
