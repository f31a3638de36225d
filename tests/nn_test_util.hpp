// Helpers shared by the nn tests: random tensors and a finite-difference gradient check.
#pragma once
#include <cmath>
#include <functional>
#include <vector>

#include <catch2/catch.hpp>

#include "nn/autograd.hpp"
#include "nn/ops.hpp"
#include "nn/rng.hpp"

namespace nn_test {

inline nn::Tensor random_tensor(const nn::Shape& shape, uint64_t seed, float stddev = 1.0f, bool grad = true) {
  nn::Rng rng(seed);
  nn::Tensor t = nn::Tensor::empty(shape, grad);
  for (float& v : t.values()) v = rng.normal(0.0f, stddev);
  return t;
}

// Checks d/dx of L = Σ_i f(inputs)_i · r_i (fixed random r) for every input that requires
// a gradient: autograd's answer against central differences (L±h), element by element.
// L is accumulated in double so only the op's own float32 rounding adds noise.
inline void check_gradients(const std::function<nn::Tensor(std::vector<nn::Tensor>&)>& f,
                            std::vector<nn::Tensor> inputs, float h = 1e-2f, double rtol = 2e-2, double atol = 2e-3) {
  nn::Tensor out = f(inputs);
  nn::Tensor weights = random_tensor(out.shape(), 999, 1.0f, false);
  nn::Tensor loss = nn::sum(nn::mul(out, weights));
  for (auto& x : inputs) x.zero_grad();
  nn::autograd::backward(loss);

  auto weighted_sum = [&] {
    nn::autograd::NoGrad no_grad;
    nn::Tensor y = f(inputs);
    double total = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) total += static_cast<double>(y.data()[i]) * weights.data()[i];
    return total;
  };
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    nn::Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    std::vector<float> analytic(x.grad(), x.grad() + x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float saved = x.data()[i];
      x.data()[i] = saved + h;
      const double up = weighted_sum();
      x.data()[i] = saved - h;
      const double down = weighted_sum();
      x.data()[i] = saved;
      const double numeric = (up - down) / (2.0 * h);
      INFO("input " << k << " element " << i << " of " << x.numel() << ": autograd " << analytic[i]
                    << ", finite difference " << numeric);
      CHECK(std::abs(analytic[i] - numeric) <= atol + rtol * std::abs(numeric));
    }
  }
}

}  // namespace nn_test
