#include "trainers/micro_steps.hpp"

#include "nn/autograd.hpp"
#include "nn/ops.hpp"

namespace trainers {

MicroSteps::MicroSteps(const TrainOptions& o, std::span<const int32_t> tokens, int block_size, int replica,
                       int replicas)
    : o_(o),
      sampler_(tokens, block_size, o.batch_size, o.grad_accum, o.sampling, o.seed, replica, replicas) {}

float MicroSteps::run(nn::GPT& model, int64_t step, StepClock& clock,
                      const std::function<void(bool last)>& before_backward) {
  const int K = o_.grad_accum, B = o_.batch_size, T = model.config().block_size;
  float mean_loss = 0;
  model.set_loss_scale(1.0f / static_cast<float>(K));  // the mixtures' balancing losses: the same mean
  for (int micro = 0; micro < K; ++micro) {
    nn::Tensor loss;
    {
      Timed data(clock, Phase::data, micro);
      sampler_.fill(step, micro, batch_);
      model.set_dropout_batch({.seed = o_.seed, .step = step, .first_sample = sampler_.first_sample(micro)});
    }
    {
      Timed forward(clock, Phase::forward, micro);
      loss = model.loss(batch_.ids, batch_.targets, B, T);
      mean_loss += loss.item() / static_cast<float>(K);
      if (K > 1) loss = nn::scale(loss, 1.0f / static_cast<float>(K));  // the step's gradient: the mean
    }
    Timed backward(clock, Phase::backward, micro);
    if (before_backward) before_backward(micro == K - 1);
    nn::autograd::backward(loss);
  }
  return mean_loss;
}

}  // namespace trainers
