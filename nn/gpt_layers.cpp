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

GPTLayers GPTLayers::filled() const {
  return {weights ? weights : std::make_shared<WholeWeights>(),
          sequence ? sequence : std::make_shared<WholeSequence>(),
          dispatcher ? dispatcher : std::make_shared<LocalDispatcher>()};
}

}  // namespace nn
