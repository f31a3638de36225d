// 1F1B (one forward, one backward), PipeDream-Flush / Megatron's non-interleaved schedule:
//
//   warm-up    stage r runs min(p − r − 1, M) forwards
//   steady     then: one forward, one backward, … (M − warm-up times)
//   cool-down  the backwards left (warm-up of them)
//
//   time →     1   2   3   4   5   6   7   8   9  10  11  12  13  14
//   stage 0   F0  F1  F2  F3   .   .   . B0   .  B1   . B2   . B3
//   stage 1    .  F0  F1  F2   .   . B0  F3  B1   . B2   . B3   .
//   stage 2    .   .  F0  F1   . B0  F2  B1  F3  B2   . B3   .   .
//   stage 3    .   .   .  F0  B0  F1  B1  F2  B2  F3  B3   .   .   .
//                                        (p = 4, M = 4; "." is the bubble)
//
// The bubble is as large as GPipe's, (p − 1)/(M + p − 1) of the step, but stage r holds at
// most p − r micro-batches' activations instead of M. In the steady state a stage sends an
// activation forward and receives a gradient from the same neighbour, which is doing the
// mirror image: the two are one paired send_recv each (see the deadlock rule in pp/stage.hpp).
#include <algorithm>

#include "parallel/pp/schedule.hpp"


namespace parallel {

void run_1f1b(StageSteps& stage) {
  const int M = stage.micro_batches();
  const int p = stage.stages(), r = stage.stage();
  const int warmup = std::min(p - r - 1, M), steady = M - warmup;

  for (int m = 0; m < warmup; ++m) {
    stage.recv_forward(m);
    stage.forward(m);
    stage.send_forward(m);
  }
  if (steady > 0) stage.recv_forward(warmup);
  for (int i = 0; i < steady; ++i) {
    const int forward_m = warmup + i, backward_m = i;
    stage.forward(forward_m);
    stage.send_forward_recv_backward(forward_m, backward_m);
    stage.backward(backward_m);
    if (i == steady - 1)
      stage.send_backward(backward_m);
    else
      stage.send_backward_recv_forward(backward_m, forward_m + 1);
  }
  for (int m = steady; m < M; ++m) {
    stage.recv_backward(m);
    stage.backward(m);
    stage.send_backward(m);
  }
}

void run_schedule(Schedule schedule, StageSteps& stage) {
  if (stage.chunks() > 1) return run_interleaved(stage, schedule == Schedule::gpipe);
  switch (schedule) {
    case Schedule::gpipe:
      return run_gpipe(stage);
    case Schedule::one_f_one_b:
      return run_1f1b(stage);
  }
}

}  // namespace parallel
