// The block's MLP, c_proj(gelu(c_fc(h))), written once: a dense block runs it through its
// layout's column and row layers (whole, or this rank's columns: nn/gpt_layers.hpp), and each
// expert of a mixture (nn/moe_mlp.hpp) runs it on the rows routed to it.
//
//   h [.., C] ─ c_fc [4C,C] (+ bias, in GELU's pass when fused) ─ gelu ─ c_proj [C,4C] (+ bias) ─ [.., C]
#pragma once
#include "nn/gemm.hpp"  // Precision
#include "nn/gpt_layers.hpp"
#include "nn/tensor.hpp"

namespace nn {

// Its four tensors (biases undefined without GPTConfig::bias); one expert's, or a block's.
struct MLPWeights {
  Tensor c_fc_weight, c_fc_bias, c_proj_weight, c_proj_bias;  // [4C,C], [4C], [C,4C], [C]
};

// What the GEMMs are called in the profile: "GEMM mlp.c_fc" and "GEMM mlp.c_proj", or an expert's.
struct MLPNames {
  const char* c_fc;
  const char* c_proj;
};

// h → c_proj(gelu(c_fc(h))) through `cut`'s column layer (c_fc) and row layer (c_proj).
// `fused_bias_gelu`: c_fc's bias added in GELU's pass (--fusion fused).
Tensor mlp(const Tensor& h, const MLPWeights& w, WeightCut& cut, Precision precision, bool fused_bias_gelu,
           bool training, MLPNames names);

}  // namespace nn
