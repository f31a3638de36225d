// Reverse-mode autograd on a dynamic tape. Each op, when any input requires a gradient,
// records a closure that turns its output's gradient into its inputs' gradients.
// backward(loss) seeds d loss/d loss = 1 and runs the tape from the end to the start.
//
//   forward:   x ──op1──> h ──op2──> loss        tape: [op1.backward, op2.backward]
//   backward:  x.grad <──op1── h.grad <──op2── 1   (run in reverse)
//
// Gradients add up (+=) until zero_grad(): calling backward twice gives twice the gradient,
// which is how gradient accumulation over micro-batches works.
#pragma once
#include <functional>
#include <initializer_list>

#include "nn/tensor.hpp"

namespace nn::autograd {

bool grad_enabled();

// While one exists, ops record nothing and outputs do not require gradients:
// evaluation and sampling.
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

// True when grad mode is on and some input requires a gradient.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

void record(std::function<void()> backward_step);

// Runs the tape backwards from a one-element `loss`, then clears the tape.
void backward(Tensor& loss);

// Drops what was recorded (a forward pass whose backward will not run).
void clear_tape();
std::size_t tape_size();

}  // namespace nn::autograd
