#include "planning/workload.hpp"

#include <cmath>

#include <fmt/format.h>

#include "planning/error.hpp"

namespace planning {

std::string name_of(Implementation implementation) {
  return implementation == Implementation::megatron ? "megatron" : "nanodist";
}

namespace {

struct NamedModel {
  const char* name;
  nn::GPTConfig config;
};

// Narayanan et al. 2021 (SC'21) Table 1 and Korthikanti et al. 2022 Table 3: GPT with
// sequence 2048 and vocabulary 51,200, biases on (Megatron's).
nn::GPTConfig published(int layers, int heads, int width) {
  return {.n_layer = layers, .n_head = heads, .n_embd = width, .block_size = 2048, .vocab_size = 51200,
          .dropout = 0.1f, .bias = true};
}

const std::vector<NamedModel>& models() {
  static const std::vector<NamedModel> all = {
      {"main-job", {.n_layer = 2, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 65}},
      {"gpt-bench-a", {.n_layer = 4, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 65}},
      {"gpt-bench-b", {.n_layer = 6, .n_head = 6, .n_embd = 384, .block_size = 256, .vocab_size = 65}},
      {"gpt-1.7b", published(24, 24, 2304)},
      {"gpt-3.6b", published(30, 32, 3072)},
      {"gpt-7.5b", published(36, 32, 4096)},
      {"gpt-18.4b", published(40, 48, 6144)},
      {"gpt-22b", published(48, 64, 6144)},
      {"gpt-39.1b", published(48, 64, 8192)},
      {"gpt-76.1b", published(60, 80, 10240)},
      {"gpt-145.6b", published(80, 96, 12288)},
      {"gpt-175b", published(96, 96, 12288)},
      {"gpt-310.1b", published(96, 128, 16384)},
      {"gpt-529.6b", published(105, 128, 20480)},
      {"gpt-530b", published(105, 128, 20480)},
      {"gpt-1t", published(128, 160, 25600)},
      // Mixtures of experts (docs/expert_parallel.md): the main job with 4 experts, one a
      // token; and Switch-Base-8's shape (Fedus et al. 2021: T5-Base, 8 experts in every
      // second block, top-1, capacity factor 1.25; T5's 32,128 tokens, 512 positions, no biases).
      {"main-job-moe",
       {.n_layer = 2, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 65, .n_experts = 4}},
      {"switch-base-8",
       {.n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 512, .vocab_size = 32128, .n_experts = 8,
        .moe_every = 2}},
      // The recipes of docs/3d_parallelism.md, GPT-shaped (a 4C GELU MLP, full multi-head
      // attention, no biases): Llama 3 405B (Dubey et al. 2024: 126 layers, 16,384 wide, 128
      // heads, T 8192, 128,256 tokens; its SwiGLU and grouped queries make 405B, this shape 408B);
      // Mixtral 8×7B (Jiang et al. 2024: 32 layers, 4096 wide, 8 experts, top-2, T 4096; its
      // SwiGLU experts of 14,336 make 46.7B, this shape 36.5B); DeepSeek-V3 (DeepSeek-AI 2024: 61
      // layers, 7168 wide, 128 heads, T 4096, 129,280 tokens) whose 256 experts of 3·7168·2048 are
      // each 1/9.3 of a GPT-shaped expert: 32 GPT-shaped experts, one a token, hold about as much
      // (13.2B a layer against 11.3B) and use about as much (411M against 8 routed + 1 shared,
      // 396M); its MLA attention counted as plain multi-head (DeepSeek's 671B, this shape 818B).
      {"llama3-405b", {.n_layer = 126, .n_head = 128, .n_embd = 16384, .block_size = 8192, .vocab_size = 128256}},
      {"mixtral-8x7b",
       {.n_layer = 32, .n_head = 32, .n_embd = 4096, .block_size = 4096, .vocab_size = 32000, .n_experts = 8,
        .experts_per_token = 2}},
      {"deepseek-v3-shaped",
       {.n_layer = 61, .n_head = 128, .n_embd = 7168, .block_size = 4096, .vocab_size = 129280, .n_experts = 32,
        .experts_per_token = 1}},
  };
  return all;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& m : models()) names.emplace_back(m.name);
  return names;
}

nn::GPTConfig model_preset(std::string_view name) {
  for (const auto& m : models())
    if (name == m.name) return m.config;
  throw Error(fmt::format("unknown model preset \"{}\" ({})", name, fmt::join(model_preset_names(), ", ")));
}

int moe_blocks_on_stage(const nn::GPTConfig& c, int pp, int stage, int virtual_stages) {
  // Stage s holds chunks s, s + pp, … of n_layer / (pp·v) blocks each (one chunk without interleaving).
  int count = 0;
  const int chunk = c.n_layer / (pp * virtual_stages);
  for (int i = 0; i < virtual_stages; ++i)
    for (int l = (stage + i * pp) * chunk; l < (stage + i * pp + 1) * chunk; ++l) count += c.is_moe_block(l) ? 1 : 0;
  return count;
}

double expert_parameters_on_stage(const nn::GPTConfig& c, int pp, int stage, int virtual_stages, int ep) {
  if (c.n_experts == 0) return 0;
  const double C = c.n_embd, expert = 8 * C * C + (c.bias ? 5 * C : 0.0);
  return static_cast<double>(moe_blocks_on_stage(c, pp, stage, virtual_stages)) * (static_cast<double>(c.n_experts) / ep) *
         expert;
}

double rank_parameter_count(const nn::GPTConfig& c, int tp, int pp, int stage, int virtual_stages, int ep) {
  const double C = c.n_embd, V = c.vocab_size, T = c.block_size, t = tp, bias = c.bias ? 1.0 : 0.0;
  // A block: the four matrices 12C² split by columns or rows; the two layernorms (2C, 4C with
  // biases) whole; c_attn's and c_fc's biases (3C, 4C) split, the two projections' (C each) whole.
  const double block = 12 * C * C / t + 2 * C * (1 + bias) + bias * (7 * C / t + 2 * C);
  double count = block * c.n_layer / pp;
  // A mixture block on this stage: E/(ep·tp) whole MLPs (the tp ranks folded into the experts'
  // group) in place of the block's cut one (8C²/t and its biases above), and the router's E·C.
  const double mlp = 8 * C * C + bias * 5 * C, cut_mlp = 8 * C * C / t + bias * (4 * C / t + C);
  count += moe_blocks_on_stage(c, pp, stage, virtual_stages) *
           (static_cast<double>(c.n_experts) / (ep * tp) * mlp - cut_mlp + c.n_experts * C);
  const double vocabulary_rows = std::ceil(V / t);  // the first tp rank's share when t does not divide V
  if (stage == 0) count += vocabulary_rows * C + T * C;                            // wte (vocab-parallel), wpe
  if (stage == pp - 1) count += C * (1 + bias) + (pp > 1 ? vocabulary_rows * C : 0);  // ln_f; the tied lm_head's copy
  return count;
}

}  // namespace planning
