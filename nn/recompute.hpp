// Activation recomputation: spend compute to keep fewer activations (--recompute).
//
//   none       every op keeps what its backward needs (the default)
//   selective  the attention core (scores, softmax, dropout, weighted sum: the [B,H,T,T]
//              weights, the memory that grows with T²) is run again in backward from its
//              input qkv, which the block keeps anyway (Korthikanti et al. 2022, Megatron)
//   full       each block keeps only its input x [B,T,C]; backward runs the whole block's
//              forward again, then its backward (torch.utils.checkpoint, Megatron's full)
//
// How recomputed(x, f) works on the tape:
//
//   forward:   y = f(x) under NoGrad — nothing recorded, f's intermediates die at once
//   backward:  y' = f(x) runs again with grad on, onto a tape of its own; y's gradient seeds
//              y' and that tape runs backward (filling x's and the weights' gradients)
//
// The replay draws the same dropout masks (a mask is a function of where its elements sit,
// nn/dropout_mask.hpp, which f carries with it — not of a generator's state), and the ops
// compute the same values with grad on or off, so a run with recomputation ends bit-identical
// to the same run without it.
#pragma once
#include <array>
#include <functional>
#include <string_view>

#include "nn/tensor.hpp"

namespace nn {

enum class Recompute { none, selective, full };
inline constexpr std::array<std::string_view, 3> kRecomputeNames = {"none", "selective", "full"};
constexpr std::string_view name_of(Recompute r) { return kRecomputeNames[static_cast<std::size_t>(r)]; }

// Which one a model uses is its ComputeModes' (nn/compute_modes.hpp).

// y = forward(x), keeping only x for backward (see above). forward must be a pure function of
// x, the weights and what it captured (by value: the model's state may have moved on to
// another micro-batch by backward), and everything it refers to must live until backward.
// Without grad mode it is forward(x).
Tensor recomputed(const Tensor& x, std::function<Tensor(const Tensor&)> forward);

}  // namespace nn
