// hello_nanodist: a program of your own on the installed library — an allreduce under the
// watchdog on the backend --backend picks, and a tiny autograd computation.
//
//   mpiexec -n 3 hello_nanodist --backend ring
#include <vector>

#include <CLI/CLI.hpp>  // the command line; comm/runtime.hpp only names CLI::App

#include "comm/runtime.hpp"
#include "nn/autograd.hpp"
#include "nn/ops.hpp"
#include "nn/tensor.hpp"

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{"hello_nanodist: an allreduce and a gradient"};
    comm::Options options;  // --backend, --timeout, --check-collectives, … for free
    comm::add_options(app, options);
    comm::parse(app, argc, argv);
    comm::Communicator& world = runtime.start(options);

    // Every rank contributes rank + 1; the sum over n ranks is n(n+1)/2 on every rank.
    std::vector<int> value{world.rank() + 1};
    world.allreduce(std::span<int>(value));
    comm::say("allreduce on {} ranks with backend {}: sum = {} (expected {})", world.size(), world.backend_name(),
              value[0], world.size() * (world.size() + 1) / 2);

    // y = Σ x², so dy/dx = 2x.
    const std::vector<float> values{1.0f, 2.0f, 3.0f};
    nn::Tensor x = nn::Tensor::from(values, {3}, /*requires_grad=*/true);
    nn::Tensor y = nn::sum(nn::mul(x, x));
    nn::autograd::backward(y);
    comm::say("y = {}, dy/dx = [{}, {}, {}]", y.item(), x.grad_values()[0], x.grad_values()[1], x.grad_values()[2]);
  });
}
