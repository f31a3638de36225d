// What a pipeline stage needs of its piece of the model: a slice of nn::GPT's layers — whole
// (train_pp), or with every matmul itself split over a tensor-parallel group (train_3d:
// parallel::TensorParallelGPT, an nn::GPT too). The pipeline code (parallel/pp/stage,
// parallel/pp/inference) calls only these.
#pragma once
#include <cstdint>
#include <span>

#include "nn/gpt.hpp"
#include "nn/tensor.hpp"

namespace parallel {

class StageModel {
 public:
  virtual ~StageModel() = default;
  virtual const nn::GPTConfig& config() const = 0;
  // The first stage: ids [B,T] → the activation passed on.
  virtual nn::Tensor embed(std::span<const int32_t> ids, int64_t B, int64_t T) = 0;
  // This stage's blocks: activation → activation. All of them, or one chunk of them
  // (interleaved 1F1B holds several chunks per stage, parallel/pp/schedule_interleaved.cpp).
  virtual nn::Tensor run_blocks(nn::Tensor x) = 0;
  virtual nn::Tensor run_chunk(nn::Tensor x, int chunk) = 0;
  virtual int chunks() const = 0;
  // The last stage: activation → the mean cross-entropy against targets [B,T].
  virtual nn::Tensor head_loss(const nn::Tensor& x, std::span<const int32_t> targets) = 0;
  // The last stage, generating: the next token's logits over the whole vocabulary / temperature.
  virtual void next_token_logits(const nn::Tensor& x, int64_t T, float temperature, std::span<float> logits) = 0;
  // The shape of the activation between stages for a batch of B×T tokens: [B,T,C], or
  // [B,T/tp,C] when it is sharded along the sequence.
  virtual nn::Shape activation_shape(int64_t B, int64_t T) const = 0;
  virtual void set_training(bool on) = 0;
  virtual bool training() const = 0;
};

// nn::GPT (or a part of it, whole or tensor-parallel) as a stage.
class GptStage final : public StageModel {
 public:
  explicit GptStage(nn::GPT& model) : model_(model) {}
  const nn::GPTConfig& config() const override { return model_.config(); }
  nn::Tensor embed(std::span<const int32_t> ids, int64_t B, int64_t T) override { return model_.embed(ids, B, T); }
  nn::Tensor run_blocks(nn::Tensor x) override { return model_.run_blocks(std::move(x)); }
  nn::Tensor run_chunk(nn::Tensor x, int chunk) override { return model_.run_chunk(std::move(x), chunk); }
  int chunks() const override { return static_cast<int>(model_.part().chunks.size()); }
  nn::Tensor head_loss(const nn::Tensor& x, std::span<const int32_t> targets) override {
    return model_.head_loss(x, targets);
  }
  void next_token_logits(const nn::Tensor& x, int64_t T, float temperature, std::span<float> logits) override {
    model_.next_token_logits(x, T, temperature, logits);
  }
  nn::Shape activation_shape(int64_t B, int64_t T) const override { return model_.activation_shape(B, T); }
  void set_training(bool on) override { model_.set_training(on); }
  bool training() const override { return model_.training(); }

 private:
  nn::GPT& model_;
};

}  // namespace parallel
