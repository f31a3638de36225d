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
#pragma once
#include <span>
#include <string_view>
#include <vector>

#include "comm/types.hpp"

namespace parallel {

// "fp32" → f32, "bf16" → bf16 (the flag's check has refused anything else).
comm::DataType gradient_wire(std::string_view name);

// fp32 → bf16 (round to nearest even) and back; the spans have the same length.
void to_bf16(std::span<const float> from, std::span<comm::bfloat16> to);
void from_bf16(std::span<const comm::bfloat16> from, std::span<float> to);

}  // namespace parallel
