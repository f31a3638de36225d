// What a parameter is to the layouts that split it (nn/gpt_layers.hpp; parallel/grid.hpp's
// parameters by role): declared where the model makes each parameter, travelling with it.
#pragma once

namespace nn {

// What a parameter is to tensor parallelism (Megatron's split), for a weight [out, in]:
//   column            cut by output rows: mlp.c_fc's weight and bias (each rank out/W rows)
//   fused_qkv_column  a column layer whose rows are q | k | v stacked, each cut by whole
//                     heads: attn.c_attn's weight and bias
//   row               cut by input columns: attn.c_proj's and mlp.c_proj's weights
//   vocabulary        cut by vocabulary rows, padded to a multiple of W: wte (= lm_head)
//   replicated        whole on every rank: wpe, the layernorms, the row layers' biases
//   expert            one expert of a mixture (nn/moe_mlp.hpp): whole, but under expert
//                     parallelism held by one rank of each expert-parallel group
//                     (parallel/ep/expert_parallel_layers.hpp), its gradient averaged apart
enum class ParameterRole { replicated, column, fused_qkv_column, row, vocabulary, expert };
const char* name_of(ParameterRole role);

}  // namespace nn
