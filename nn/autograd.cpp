#include "nn/autograd.hpp"

#include <vector>

#include "nn/error.hpp"
#include "nn/profile.hpp"

namespace nn::autograd {
namespace {

struct State {
  bool enabled = true;
  Tape own_tape;           // the thread's tape
  Tape* tape = &own_tape;  // where ops record now (a TapeScope's, or own_tape)
};

State& state() {
  thread_local State s;
  return s;
}

}  // namespace

bool grad_enabled() { return state().enabled; }

NoGrad::NoGrad() : previous_(state().enabled) { state().enabled = false; }
NoGrad::~NoGrad() { state().enabled = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void record(std::function<void()> backward_step) { state().tape->record(std::move(backward_step)); }

void Tape::run_backward() {
  profile::InPass backward(profile::Pass::backward);
  for (auto step = steps_.rbegin(); step != steps_.rend(); ++step) {
    (*step)();
    *step = nullptr;  // its closure's tensors (and their gradients) go now, not at the end
  }
  steps_.clear();
}

TapeScope::TapeScope(Tape& tape) : previous_(state().tape) { state().tape = &tape; }
TapeScope::~TapeScope() { state().tape = previous_; }

void backward(Tensor& loss) {
  if (loss.numel() != 1) fail("backward() needs a one-element loss, got shape {}", shape_string(loss.shape()));
  const float one = 1.0f;
  backward(loss, std::span(&one, 1));
}

void backward(Tensor& output, std::span<const float> grad_output) {
  if (!output.requires_grad()) fail("backward(): the output does not depend on any tensor that requires a gradient");
  if (static_cast<int64_t>(grad_output.size()) != output.numel())
    fail("backward(): {} gradient values for an output of shape {}", grad_output.size(), shape_string(output.shape()));
  float* g = output.grad();
  for (std::size_t i = 0; i < grad_output.size(); ++i) g[i] += grad_output[i];
  state().tape->run_backward();
}

void clear_tape() { state().tape->clear(); }
std::size_t tape_size() { return state().tape->size(); }

}  // namespace nn::autograd
