#include "parallel/tp/tensor_parallel_gpt.hpp"

#include <cmath>
#include <utility>

#include "nn/grad_clip.hpp"

namespace parallel {

TensorParallelGPT::TensorParallelGPT(const nn::GPTConfig& config, uint64_t seed, comm::Communicator& tp,
                                     bool sequence_parallel, std::optional<nn::GPTPart> part,
                                     const nn::ComputeModes& modes)
    : TensorParallelGPT(std::make_shared<TensorParallelLayers>(config, tp, sequence_parallel), config, seed, part,
                        modes) {}

// The layers exist before the model: nn::GPT's constructor hands them each parameter to cut.
TensorParallelGPT::TensorParallelGPT(std::shared_ptr<TensorParallelLayers> layers, const nn::GPTConfig& config,
                                     uint64_t seed, std::optional<nn::GPTPart> part, const nn::ComputeModes& modes)
    : nn::GPT(config, seed, part.value_or(nn::GPTPart::whole(config)), modes, layers), layers_(std::move(layers)) {}

nn::Tensor TensorParallelGPT::tied_embedding() {
  for (const nn::NamedTensor& p : parameters())
    if (p.name == "transformer.wte.weight") return p.tensor;
  return {};
}

void TensorParallelGPT::sum_replicated_grads() {
  if (!sequence_parallel()) return;
  std::vector<float> flat;  // every replicated gradient in one buffer: one all-reduce
  for (const TpParameter& p : slices())
    if (p.split == TpSplit::replicated) flat.insert(flat.end(), p.tensor.grad(), p.tensor.grad() + p.tensor.numel());
  layers_->group().allreduce(std::span(flat));
  std::size_t at = 0;
  for (const TpParameter& p : slices())
    if (p.split == TpSplit::replicated) {
      std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), p.tensor.numel(), p.tensor.grad());
      at += static_cast<std::size_t>(p.tensor.numel());
    }
}

double TensorParallelGPT::squared_grad_norm() {
  std::vector<nn::NamedTensor> split, replicated;
  for (const TpParameter& p : slices()) {
    if (p.name == "transformer.wte.weight" && !part().embedding) continue;  // the head's copy: counted on stage 0
    (p.split == TpSplit::replicated ? replicated : split).push_back({p.name, p.tensor});
  }
  double squares = nn::squared_grad_norm(split);
  layers_->group().allreduce(std::span(&squares, 1));
  return squares + nn::squared_grad_norm(replicated);
}

float TensorParallelGPT::clip_grad_norm(float max_norm) {
  const auto norm = static_cast<float>(std::sqrt(squared_grad_norm()));
  if (max_norm > 0.0f) nn::clip_to_norm(parameters(), max_norm, norm);
  return norm;
}

}  // namespace parallel
