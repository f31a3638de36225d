// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_): when the L2 norm of all
// gradients together exceeds max_norm, scale every gradient by max_norm / (norm + 1e-6).
#pragma once
#include <vector>

#include "nn/gpt.hpp"

namespace nn {

// The global L2 norm of the gradients (before clipping).
float grad_norm(std::vector<NamedTensor>& parameters);

// Clips in place; returns the norm before clipping. max_norm ≤ 0 only measures.
float clip_grad_norm(std::vector<NamedTensor>& parameters, float max_norm);

}  // namespace nn
