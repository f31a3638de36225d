#include "nn/gpt_layers.hpp"

#include <algorithm>

#include "nn/ops.hpp"

namespace nn {

const char* name_of(ParameterRole role) {
  switch (role) {
    case ParameterRole::replicated: return "replicated";
    case ParameterRole::column: return "column";
    case ParameterRole::fused_qkv_column: return "fused-qkv column";
    case ParameterRole::row: return "row";
    case ParameterRole::vocabulary: return "vocabulary";
    case ParameterRole::expert: return "expert";
  }
  return "?";
}

Tensor WholeWeights::token_embedding(const Tensor& wte, std::span<const int32_t> ids, int64_t B, int64_t T, bool) {
  return embedding(wte, ids, {B, T});  // [B,T,C]
}

Tensor WholeWeights::column_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family,
                                   Precision precision, bool) {
  return linear(x, weight, bias, family, precision);
}

Tensor WholeWeights::row_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* family,
                                Precision precision, bool) {
  return linear(x, weight, bias, family, precision);
}

Tensor WholeWeights::cross_entropy(const Tensor& logits, std::span<const int32_t> targets) {
  return nn::cross_entropy(logits, targets);
}

void WholeWeights::gather_vocabulary(std::span<const float> mine, std::span<float> whole) {
  std::ranges::copy(mine, whole.begin());
}

std::vector<Tensor> LocalDispatcher::run_experts(const Tensor& tokens, std::span<const std::vector<int32_t>> rows,
                                                 const ExpertFunction& expert) {
  std::vector<Tensor> outputs(rows.size());
  for (std::size_t e = 0; e < rows.size(); ++e)
    if (!rows[e].empty()) outputs[e] = expert(static_cast<int>(e), gather_rows(tokens, rows[e]));  // [M_e,C]
  return outputs;
}

void SequenceLayout::count_choices(std::span<const int64_t> mine, int64_t G, int runs, int E,
                                   std::span<int64_t> before, std::span<int64_t> whole, bool) {
  for (int64_t g = 0; g < G; ++g)
    for (int e = 0; e < E; ++e) {
      int64_t sum = 0;  // the runs in sequence order
      for (int r = 0; r < runs; ++r) {
        const auto at = static_cast<std::size_t>((g * runs + r) * E + e);
        before[at] = sum;
        sum += mine[at];
      }
      whole[static_cast<std::size_t>(g * E + e)] = sum;
    }
}

GPTLayers GPTLayers::filled() const {
  return {weights ? weights : std::make_shared<WholeWeights>(),
          sequence ? sequence : std::make_shared<WholeSequence>(),
          dispatcher ? dispatcher : std::make_shared<LocalDispatcher>()};
}

}  // namespace nn
