// nanoGPT's learning-rate schedule:
//
//   lr ▲     ╱‾‾‾‾‾‾‾╲__                     linear warm-up over warmup_iters steps,
//      │    ╱           ‾‾╲__                 cosine decay to min_lr at lr_decay_iters,
//      │   ╱                 ‾‾‾‾‾‾‾ min_lr   then min_lr.
//      └──┴──────────────────┴──────────▶ step
#pragma once

namespace nn {

struct LrSchedule {
  float learning_rate = 1e-3f;
  float min_lr = 1e-4f;
  int warmup_iters = 100;
  int lr_decay_iters = 5000;
  bool decay = true;  // false: constant learning_rate

  float at(int step) const;
};

}  // namespace nn
