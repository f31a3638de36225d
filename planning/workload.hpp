// What is planned: a model, its precision, a global batch on a number of devices, and which
// implementation's memory to count — nanodist's own (nn/memory_estimate: what these trainers
// keep, measured to the byte) or Megatron-LM's (Korthikanti et al. 2022's formulas), for the
// GPU clusters the published tables ran on.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nn/gemm.hpp"
#include "nn/gpt.hpp"
#include "nn/recompute.hpp"

namespace planning {

enum class Implementation { nanodist, megatron };
std::string name_of(Implementation implementation);

struct Workload {
  nn::GPTConfig model;
  nn::Precision precision = nn::Precision::fp32;
  int64_t global_batch = 1;  // sequences per optimizer step
  int devices = 1;           // ranks
  Implementation implementation = Implementation::nanodist;
};

// Models by name: "main-job" (train_dp's default), "gpt-bench-a", "gpt-bench-b", and the GPT
// rows of Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022 Table 3: "gpt-1.7b",
// "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-22b", "gpt-39.1b", "gpt-76.1b", "gpt-145.6b",
// "gpt-175b", "gpt-310.1b", "gpt-529.6b" ("gpt-530b"), "gpt-1t" (sequence 2048, vocabulary 51,200);
// mixtures of experts "main-job-moe" (4 experts, top-1) and "switch-base-8".
std::vector<std::string> model_preset_names();
nn::GPTConfig model_preset(std::string_view name);  // throws planning::Error

// Parameters one rank holds: a pipeline stage's blocks (and the embedding on the first stage,
// ln_f and the tied lm_head on the last) as a tensor-parallel slice of 1/tp (layernorms, the
// position embedding and the row-parallel biases whole on every tp rank).
// A mixture of experts' blocks count its E experts and router (layouts with tp refuse it); E/ep
// of the experts under expert parallelism.
double rank_parameter_count(const nn::GPTConfig& model, int tp, int pp, int stage, int virtual_stages = 1, int ep = 1);
// How many of a stage's n_layer/pp blocks are mixtures of experts (its v chunks under interleaving).
int moe_blocks_on_stage(const nn::GPTConfig& model, int pp, int stage, int virtual_stages = 1);
// The expert parameters a rank of that stage holds: E/ep experts of each mixture block (8C² + 5C
// with biases each).
double expert_parameters_on_stage(const nn::GPTConfig& model, int pp, int stage, int virtual_stages, int ep);

}  // namespace planning
