// The step of a trainer whose model takes whole micro-batches (train_dp, train_tp; the
// pipeline trainers cut theirs into a schedule's micro-batches instead): K = --grad-accum
// micro-steps, each one data → forward → backward, timed; each loss scaled by 1/K, so the
// gradients add up to the step's mean.
//
//   for micro in 0 … K−1:
//     data      this rank's micro-batch (BatchSampler) and its dropout masks' place
//     forward   loss_micro = model.loss(ids, targets) / K
//     backward  before_backward(last micro-step?), then backward from loss_micro
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "nn/gpt.hpp"
#include "trainers/batches.hpp"
#include "trainers/train_options.hpp"
#include "trainers/training_loop.hpp"

namespace trainers {

class MicroSteps {
 public:
  // Windows of block_size + 1 of `tokens`; this rank draws replica `replica` of `replicas`'
  // share of each global batch (train_dp: its rank of N; train_tp: 0 of 1 — every rank of the
  // group the same batch).
  MicroSteps(const TrainOptions& o, std::span<const int32_t> tokens, int block_size, int replica, int replicas);

  // One step's micro-steps on `model`; `before_backward(last)` runs before each backward (a
  // data-parallel averager arms itself on the last). Returns this rank's mean loss over them.
  float run(nn::GPT& model, int64_t step, StepClock& clock, const std::function<void(bool last)>& before_backward = {});

 private:
  const TrainOptions& o_;
  BatchSampler sampler_;
  Batch batch_;
};

}  // namespace trainers
