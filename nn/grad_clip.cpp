#include "nn/grad_clip.hpp"
#include "nn/profile.hpp"

#include <cmath>

namespace nn {

float grad_norm(std::vector<NamedTensor>& parameters) {
  return static_cast<float>(std::sqrt(squared_grad_norm(parameters)));
}

double squared_grad_norm(std::vector<NamedTensor>& parameters) {
  double total = 0.0;
  for (auto& p : parameters) {
    const float* g = p.tensor.grad();
    const int64_t n = p.tensor.numel();
    double sq = 0.0;
#pragma omp parallel for reduction(+ : sq) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(g[i]) * g[i];
    total += sq;
  }
  return total;
}

float clip_grad_norm(std::vector<NamedTensor>& parameters, float max_norm) {
  double elements = 0;  // (counted only for the profile)
  if (profile::enabled())
    for (const auto& p : parameters) elements += static_cast<double>(p.tensor.numel());
  profile::Scope scope("clip grad norm", 4.0 * elements);  // read every gradient (12 bytes each when it scales)
  const float norm = grad_norm(parameters);
  clip_to_norm(parameters, max_norm, norm);
  return norm;
}

float clip_coefficient(float max_norm, float norm) {
  if (max_norm <= 0.0f) return 1.0f;
  const float coef = max_norm / (norm + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
}

void clip_to_norm(std::vector<NamedTensor>& parameters, float max_norm, float norm) {
  const float coef = clip_coefficient(max_norm, norm);
  if (coef < 1.0f) {
    for (auto& p : parameters)
      for (float& g : p.tensor.grad_values()) g *= coef;
  }
}

}  // namespace nn
