#include "nn/recompute.hpp"

#include "nn/autograd.hpp"
#include "nn/profile.hpp"

namespace nn {
Tensor recomputed(const Tensor& x, std::function<Tensor(const Tensor&)> forward) {
  if (!autograd::grad_enabled()) return forward(x);
  Tensor y;
  {
    autograd::NoGrad no_grad;  // nothing recorded: forward's intermediates are freed as it goes
    y = forward(x);
  }
  // y's values, tracked: what follows records onto the tape as usual and fills y's gradient.
  Tensor output = y.detach();
  output.set_requires_grad(true);

  autograd::record([x, output, forward = std::move(forward)] {
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
