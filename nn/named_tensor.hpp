// A parameter with its name and role, as the model lists them (nn::GPT::parameters()).
#pragma once
#include <string>

#include "nn/parameter_role.hpp"
#include "nn/tensor.hpp"

namespace nn {

// A parameter: its nanoGPT name, this process's tensor, and how tensor parallelism cuts it
// (declared where the model makes it; replicated for anything that is not a model's parameter).
struct NamedTensor {
  std::string name;
  Tensor tensor;
  ParameterRole role = ParameterRole::replicated;
};

}  // namespace nn
