#include "nn/recompute.hpp"

#include "nn/autograd.hpp"

namespace nn {
namespace {
Recompute g_recompute = Recompute::none;
}  // namespace

void set_recompute(Recompute recompute) { g_recompute = recompute; }
Recompute recompute_mode() { return g_recompute; }

Tensor recomputed(const Tensor& x, std::function<Tensor(const Tensor&)> forward, std::initializer_list<Rng*> rngs) {
  if (!autograd::grad_enabled()) return forward(x);
  std::vector<Rng*> generators(rngs);
  std::vector<Rng> before;  // the generators as forward found them
  for (Rng* rng : generators) before.push_back(*rng);

  Tensor y;
  {
    autograd::NoGrad no_grad;  // nothing recorded: forward's intermediates are freed as it goes
    y = forward(x);
  }
  // y's values, tracked: what follows records onto the tape as usual and fills y's gradient.
  Tensor output = y.detach();
  output.set_requires_grad(true);

  autograd::record([x, output, forward = std::move(forward), generators, before] {
    std::vector<Rng> now;  // the generators' state in backward, given back after the replay
    for (std::size_t i = 0; i < generators.size(); ++i) {
      now.push_back(*generators[i]);
      *generators[i] = before[i];
    }
    // x's alias shares its storage, so the replay's gradient lands in x's gradient buffer
    // exactly as the ops would have written it without recomputation.
    Tensor input = x.detach();
    input.set_requires_grad(x.requires_grad());
    autograd::Tape tape;
    {
      autograd::TapeScope scope(tape);
      Tensor replayed = forward(input);
      autograd::backward(replayed, output.grad_values());  // runs `tape`, then empties it
    }
    for (std::size_t i = 0; i < generators.size(); ++i) *generators[i] = now[i];
  });
  return output;
}

}  // namespace nn
