#include "parallel/dp/gradient_wire.hpp"

#include <algorithm>

#include "numeric/bf16.hpp"

namespace parallel {

WireBuffer::WireBuffer(GradientWire wire, std::size_t count) : wire_(wire) { resize(count); }

void WireBuffer::resize(std::size_t count) {
  if (wire_ == GradientWire::bf16)
    bf16_.resize(count);
  else if (count != size_ || !f32_.defined())
    f32_ = nn::Tensor::empty({static_cast<int64_t>(count)});
  size_ = count;
}

void WireBuffer::pack(std::span<const float> gradients, std::size_t at) {
  if (wire_ == GradientWire::bf16)
    numeric::round_to_bf16(gradients, std::span(bf16_).subspan(at, gradients.size()));
  else
    std::copy(gradients.begin(), gradients.end(), f32_.data() + at);
}

void WireBuffer::zero_from(std::size_t from) {
  if (wire_ == GradientWire::bf16)
    std::fill(bf16_.begin() + static_cast<std::ptrdiff_t>(from), bf16_.end(), comm::bfloat16(0.0f));
  else
    std::fill(f32_.data() + from, f32_.data() + size_, 0.0f);
}

void WireBuffer::unpack(std::size_t at, std::span<float> gradients) const {
  if (wire_ == GradientWire::bf16)
    numeric::widen_to_float(std::span(bf16_).subspan(at, gradients.size()), gradients);
  else
    std::copy_n(f32_.data() + at, gradients.size(), gradients.begin());
}

void WireBuffer::add_into(std::size_t at, std::span<float> gradients) const {
  for (std::size_t i = 0; i < gradients.size(); ++i)
    gradients[i] += wire_ == GradientWire::bf16 ? static_cast<float>(bf16_[at + i]) : f32_.data()[at + i];
}

void WireBuffer::allreduce(comm::Communicator& group, comm::ReduceOp op) {
  if (wire_ == GradientWire::bf16)
    group.allreduce(std::span(bf16_), op);
  else
    group.allreduce(f32_.values(), op);
}

comm::Work WireBuffer::allreduce_async(comm::Communicator& group, comm::ReduceOp op) {
  return wire_ == GradientWire::bf16 ? group.allreduce_async(std::span(bf16_), op)
                                     : group.allreduce_async(f32_.values(), op);
}

comm::Work WireBuffer::reduce_scatter_async(comm::Communicator& group, WireBuffer& into, comm::ReduceOp op) {
  return wire_ == GradientWire::bf16 ? group.reduce_scatter_async(std::span(bf16_), std::span(into.bf16_), op)
                                     : group.reduce_scatter_async(f32_.values(), into.f32_.values(), op);
}

void average_on_wire(std::span<float> gradients, comm::Communicator& group, GradientWire wire, WireBuffer& scratch) {
  if (wire == GradientWire::fp32) {
    group.allreduce(gradients, comm::ReduceOp::avg);
    return;
  }
  if (scratch.wire() != wire) scratch = WireBuffer(wire, 0);
  scratch.resize(gradients.size());
  scratch.pack(gradients, 0);
  scratch.allreduce(group, comm::ReduceOp::avg);
  scratch.unpack(0, gradients);
}

const char* wire_note(GradientWire wire) { return wire == GradientWire::bf16 ? ", gradients sent as bf16" : ""; }

}  // namespace parallel
