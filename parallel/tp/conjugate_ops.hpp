// Megatron's conjugate operators f and g: the only places a tensor-parallel MLP or attention
// block talks to the other ranks of its tensor-parallel group (Shoeybi et al. 2019, fig. 3).
//
//   x ──f──> [column-parallel linear → … → row-parallel linear] ──g──> y
//
//   f: forward identity (every rank already holds the whole x), backward all-reduce: each
//      rank computed only its slice's contribution to dL/dx, and x's gradient is their sum.
//   g: forward all-reduce (each rank holds a partial sum of y), backward identity (dL/dy is
//      the same on every rank, and each partial sum's gradient is dL/dy itself).
//
// They are conjugate: f's backward is g's forward and the other way round.
#pragma once

#include "comm/communicator.hpp"
#include "nn/tensor.hpp"

namespace parallel {

// f: x itself forward (a copy, so that its backward can be intercepted); the gradient that
// comes back is summed over `tp` before it reaches x.
nn::Tensor copy_to_tensor_parallel(const nn::Tensor& x, comm::Communicator& tp);

// g: the sum of x over `tp` forward; the gradient passes back unchanged.
nn::Tensor reduce_from_tensor_parallel(const nn::Tensor& x, comm::Communicator& tp);

}  // namespace parallel
