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
//   forward:   y = f(x) under NoGrad — nothing recorded, f's intermediates die at once;
//              the generators f draws from are saved as they stood before
//   backward:  the saved generators are put back, y' = f(x) runs again with grad on, onto a
//              tape of its own; y's gradient seeds y' and that tape runs backward (filling
//              x's and the weights' gradients); the generators are given their state back
//
// The replay draws the same dropout masks (a mask is a hash of the generator's state), and
// the ops compute the same values with grad on or off, so a run with recomputation ends
// bit-identical to the same run without it.
#pragma once
#include <array>
#include <functional>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "nn/rng.hpp"
#include "nn/tensor.hpp"

namespace nn {

enum class Recompute { none, selective, full };
inline constexpr std::array<std::string_view, 3> kRecomputeNames = {"none", "selective", "full"};
constexpr std::string_view name_of(Recompute r) { return kRecomputeNames[static_cast<std::size_t>(r)]; }

// Process-wide, like the attention kernel (nn/compute_modes.hpp sets it); the models read it.
void set_recompute(Recompute recompute);
Recompute recompute_mode();

// y = forward(x), keeping only x for backward (see above). `rngs`: every generator forward
// draws from. forward must be a pure function of x, the weights and those generators, and
// everything it refers to must live until backward. Without grad mode it is forward(x).
Tensor recomputed(const Tensor& x, std::function<Tensor(const Tensor&)> forward, std::initializer_list<Rng*> rngs);

}  // namespace nn
