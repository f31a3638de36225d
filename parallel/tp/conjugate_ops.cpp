#include "parallel/tp/conjugate_ops.hpp"

#include <algorithm>

#include "nn/autograd.hpp"

namespace parallel {
namespace {

// x's gradient += `from` (or = when x's gradient buffer is fresh).
void add_to_grad(const nn::Tensor& x, const float* from) {
  auto [dx, accumulate] = x.grad_target();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) dx[i] = (accumulate ? dx[i] : 0.0f) + from[i];
}

}  // namespace

// forward:  y = x                        (shape of x, e.g. [B,T,C])
// backward: dx += allreduce_sum(dy) over tp
nn::Tensor copy_to_tensor_parallel(const nn::Tensor& x, comm::Communicator& tp) {
  if (tp.size() == 1) return x;  // one rank: nothing to sum (train_3d --tp 1)
  const bool track = nn::autograd::needs_grad({&x});
  nn::Tensor y = x.clone();
  y.set_requires_grad(track);
  if (track) {
    nn::autograd::record([x, y, &tp]() {
      std::span<float> dy = y.grad_values();
      tp.allreduce(dy);  // in place: dy is y's own gradient, not needed afterwards
      add_to_grad(x, dy.data());
    });
  }
  return y;
}

// forward:  y = allreduce_sum(x) over tp
// backward: dx += dy
nn::Tensor reduce_from_tensor_parallel(const nn::Tensor& x, comm::Communicator& tp) {
  if (tp.size() == 1) return x;
  const bool track = nn::autograd::needs_grad({&x});
  nn::Tensor y = x.clone();
  tp.allreduce(y.values());
  y.set_requires_grad(track);
  if (track) nn::autograd::record([x, y]() { add_to_grad(x, y.grad()); });
  return y;
}

}  // namespace parallel
