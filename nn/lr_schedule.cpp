#include "nn/lr_schedule.hpp"

#include <cmath>
#include <numbers>

namespace nn {

float LrSchedule::at(int step) const {
  if (!decay) return learning_rate;
  if (step < warmup_iters) return learning_rate * static_cast<float>(step + 1) / static_cast<float>(warmup_iters + 1);
  if (step > lr_decay_iters) return min_lr;
  const double ratio = static_cast<double>(step - warmup_iters) / static_cast<double>(lr_decay_iters - warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));  // 1 → 0
  return static_cast<float>(min_lr + coeff * (learning_rate - min_lr));
}

}  // namespace nn
