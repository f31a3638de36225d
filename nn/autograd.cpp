#include "nn/autograd.hpp"

#include <vector>

#include "nn/error.hpp"

namespace nn::autograd {
namespace {

struct State {
  bool enabled = true;
  std::vector<std::function<void()>> tape;
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

void record(std::function<void()> backward_step) { state().tape.push_back(std::move(backward_step)); }

void backward(Tensor& loss) {
  if (loss.numel() != 1) fail("backward() needs a one-element loss, got shape {}", shape_string(loss.shape()));
  if (!loss.requires_grad()) fail("backward(): the loss does not depend on any tensor that requires a gradient");
  loss.grad()[0] += 1.0f;
  auto& tape = state().tape;
  for (auto step = tape.rbegin(); step != tape.rend(); ++step) (*step)();
  tape.clear();
}

void clear_tape() { state().tape.clear(); }
std::size_t tape_size() { return state().tape.size(); }

}  // namespace nn::autograd
