// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_): when the L2 norm of all
// gradients together exceeds max_norm, scale every gradient by max_norm / (norm + 1e-6).
#pragma once
#include <vector>

#include "nn/named_tensor.hpp"

namespace nn {

// The global L2 norm of the gradients (before clipping).
float grad_norm(std::vector<NamedTensor>& parameters);

// Clips in place; returns the norm before clipping. max_norm ≤ 0 only measures.
float clip_grad_norm(std::vector<NamedTensor>& parameters, float max_norm);

// The two halves, for a model split over ranks: Σ g² of these parameters (ranks add theirs
// up), then the scaling every rank applies once the global norm is known.
double squared_grad_norm(std::vector<NamedTensor>& parameters);
void clip_to_norm(std::vector<NamedTensor>& parameters, float max_norm, float norm);
// What every gradient is multiplied by: max_norm / (norm + 1e-6) when that is below 1, else 1.
float clip_coefficient(float max_norm, float norm);

}  // namespace nn
