// Softmax over the last dimension (the attention op has its own fused copy of this).
#include <algorithm>
#include <cmath>

#include "nn/autograd.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {

// forward (each row):  y_j = exp(x_j − max x) / Σ_k exp(x_k − max x)
// backward:            dx_j += y_j · (dy_j − Σ_k dy_k · y_k)
Tensor softmax(const Tensor& x) {
  const int64_t C = x.size(-1), rows = x.rows_of_last("softmax");
  profile::Scope scope("softmax", 8.0 * rows * C);  // read x, write y
  bool track = autograd::needs_grad({&x});
  Tensor y = Tensor::empty(x.shape(), track);
  const float* xd = x.data();
  float* yd = y.data();
#pragma omp parallel for schedule(static) if (rows * C > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xd + r * C;
    float* yr = yd + r * C;
    float max = *std::max_element(xr, xr + C), total = 0.0f;
    for (int64_t j = 0; j < C; ++j) total += yr[j] = std::exp(xr[j] - max);
    for (int64_t j = 0; j < C; ++j) yr[j] /= total;
  }
  if (track) {
    autograd::record([x, y, rows, C]() mutable {
      profile::Scope backward_scope("softmax", 12.0 * rows * C);  // read y, dy; write dx
      const float *yv = y.data(), *dy = y.grad();
      float* dx = x.grad();
#pragma omp parallel for schedule(static) if (rows * C > 32768)
      for (int64_t r = 0; r < rows; ++r) {
        float dot = 0.0f;
        for (int64_t j = 0; j < C; ++j) dot += dy[r * C + j] * yv[r * C + j];
        for (int64_t j = 0; j < C; ++j) dx[r * C + j] += yv[r * C + j] * (dy[r * C + j] - dot);
      }
    });
  }
  return y;
}

}  // namespace nn
