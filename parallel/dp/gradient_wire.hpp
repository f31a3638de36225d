// --grad-comm: the element type gradients travel in between data-parallel ranks.
//
//   fp32  the gradients as they are: 4 bytes each
//   bf16  PyTorch DDP's bf16_compress_hook: each rank rounds its fp32 gradients to bf16 (2 bytes:
//         half the traffic), the allreduce or reduce-scatter averages them in bf16, and the
//         result is written back into fp32 gradients — master weights, AdamW and clipping stay fp32.
//
// Rounding to bf16 keeps 8 significant bits (a relative error ≤ 2⁻⁸ per element), and the
// ring adds N partial sums, each rounded again: the average carries a relative error of about
// (N + 1)·2⁻⁸ of the gradients' magnitude. SGD-like training tolerates it (the main job reaches
// the same loss); what it saves is bandwidth, which matters when the network is the bottleneck.
//
// Every averaging goes through here — naive and bucketed DDP, ZeRO's reduce-scatter, the dp
// group of train_pp/tp/3d — as three steps: pack (fp32 → the wire's type), reduce, unpack.
#pragma once
#include <array>
#include <cstddef>
#include <string_view>
#include <span>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/types.hpp"
#include "nn/tensor.hpp"

namespace parallel {

// What --grad-comm parses into, and its names on the command line and in the checkpoint.
enum class GradientWire { fp32, bf16 };
inline constexpr std::array<std::string_view, 2> kGradientWireNames = {"fp32", "bf16"};
constexpr std::string_view name_of(GradientWire wire) { return kGradientWireNames[static_cast<std::size_t>(wire)]; }
// The element type the collectives move: comm::DataType::f32 or bf16.
constexpr comm::DataType element_type(GradientWire wire) {
  return wire == GradientWire::bf16 ? comm::DataType::bf16 : comm::DataType::f32;
}

// A flat buffer of `count` gradients in the wire's type: fp32 in tensor memory (the memory
// report counts it), or bf16.
class WireBuffer {
 public:
  WireBuffer() = default;
  WireBuffer(GradientWire wire, std::size_t count);

  GradientWire wire() const { return wire_; }
  std::size_t size() const { return size_; }
  void resize(std::size_t count);  // keeps the memory it has where it can
  std::size_t bytes() const { return size_ * comm::size_of(element_type(wire_)); }

  // fp32 gradients into [at, at + n) (rounded on a bf16 wire); zeros into [from, size()).
  void pack(std::span<const float> gradients, std::size_t at);
  void zero_from(std::size_t from);
  // The wire's values at [at, at + n) back into fp32 gradients: written over them, or added.
  void unpack(std::size_t at, std::span<float> gradients) const;
  void add_into(std::size_t at, std::span<float> gradients) const;

  void allreduce(comm::Communicator& group, comm::ReduceOp op);
  comm::Work allreduce_async(comm::Communicator& group, comm::ReduceOp op);
  // This buffer holds group.size() blocks of into.size(); `into` gets this rank's block
  // reduced over the group. This buffer is work space until the Work is waited for.
  comm::Work reduce_scatter_async(comm::Communicator& group, WireBuffer& into, comm::ReduceOp op);

 private:
  GradientWire wire_ = GradientWire::fp32;
  std::size_t size_ = 0;
  nn::Tensor f32_;                    // on an fp32 wire
  std::vector<comm::bfloat16> bf16_;  // on a bf16 wire
};

// Averages `gradients` in place over `group` and returns once done: on an fp32 wire the
// allreduce runs on them directly; on a bf16 wire they are packed into `scratch` (resized to
// them), averaged there and widened back.
void average_on_wire(std::span<float> gradients, comm::Communicator& group, GradientWire wire, WireBuffer& scratch);

// ", gradients sent as bf16" on a bf16 wire, "" on fp32: for the layout lines.
const char* wire_note(GradientWire wire);

}  // namespace parallel
