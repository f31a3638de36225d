#include "nn/recompute.hpp"

#include "nn/autograd.hpp"
#include "nn/profile.hpp"

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
    // The generators' state in backward, given back after the replay (also when it throws).
    struct GiveBack {
      const std::vector<Rng*>& generators;
      std::vector<Rng> now;
      ~GiveBack() {
        for (std::size_t i = 0; i < generators.size(); ++i) *generators[i] = now[i];
      }
    } give_back{generators, {}};
    for (std::size_t i = 0; i < generators.size(); ++i) {
      give_back.now.push_back(*generators[i]);
      *generators[i] = before[i];
    }
    // x's alias shares its storage, so the replay's gradient lands in x's gradient buffer
    // exactly as the ops would have written it without recomputation.
    Tensor input = x.detach();
    input.set_requires_grad(x.requires_grad());
    autograd::Tape tape;
    {
      autograd::TapeScope scope(tape);
      Tensor replayed = [&] {
        profile::InPass replay(profile::Pass::recompute);  // gpt_bench --profile shows it apart
        return forward(input);
      }();
      autograd::backward(replayed, output.grad_values());  // runs `tape`, then empties it
    }
  });
  return output;
}

}  // namespace nn
