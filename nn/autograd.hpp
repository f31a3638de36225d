// Reverse-mode autograd on a dynamic tape. Each op, when any input requires a gradient,
// records a closure that turns its output's gradient into its inputs' gradients.
// backward(loss) seeds d loss/d loss = 1 and runs the tape from the end to the start.
//
//   forward:   x ──op1──> h ──op2──> loss        tape: [op1.backward, op2.backward]
//   backward:  x.grad <──op1── h.grad <──op2── 1   (run in reverse)
//
// Gradients add up (+=) until zero_grad(): calling backward twice gives twice the gradient,
// which is how gradient accumulation over micro-batches works.
//
// Ops record onto the *current* tape: a thread's own tape, or — while a TapeScope lives —
// the Tape it names. Pipeline parallelism keeps several forward passes alive at once (one
// per micro-batch in flight, each on its own Tape) and runs each backward later from the
// gradient the next stage sent back: backward(output, grad_output).
#pragma once
#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

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

// The backward steps of one forward pass, in the order they were recorded.
class Tape {
 public:
  Tape() = default;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;
  Tape(Tape&&) = default;
  Tape& operator=(Tape&&) = default;

  void record(std::function<void()> backward_step) { steps_.push_back(std::move(backward_step)); }
  void run_backward();  // every step, last recorded first; then empty
  void clear() { steps_.clear(); }
  std::size_t size() const { return steps_.size(); }

 private:
  std::vector<std::function<void()>> steps_;
};

// While one exists, ops on this thread record onto `tape` instead of the current one.
class TapeScope {
 public:
  explicit TapeScope(Tape& tape);
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* previous_;
};

// Runs the current tape backwards from a one-element `loss` (seeding d loss/d loss = 1),
// then clears the tape.
void backward(Tensor& loss);

// Runs the current tape backwards from `output`, seeding its gradient with `grad_output`
// (same number of elements): how a pipeline stage backpropagates the gradient of its
// activations that the next stage sent back.
void backward(Tensor& output, std::span<const float> grad_output);

// Drops what was recorded on the current tape (a forward pass whose backward will not run).
void clear_tape();
std::size_t tape_size();

}  // namespace nn::autograd
