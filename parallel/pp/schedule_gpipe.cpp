// GPipe: all forwards, then all backwards. The naive schedule — not what is used in
// practice, but the starting point: every stage holds all M micro-batches' activations.
//
//   time →     1   2   3   4   5   6   7   8   9  10  11  12  13  14
//   stage 0   F0  F1  F2  F3   .   .   .   .   .   . B0  B1  B2  B3
//   stage 1    .  F0  F1  F2  F3   .   .   .   . B0  B1  B2  B3   .
//   stage 2    .   .  F0  F1  F2  F3   .   . B0  B1  B2  B3   .   .
//   stage 3    .   .   .  F0  F1  F2  F3  B0  B1  B2  B3   .   .   .
//                                        (p = 4, M = 4; "." is the bubble)
//
// Backwards run in the order 0 … M−1 (like 1F1B), so the two schedules sum gradients in the
// same order. Messages only go one way at a time, so plain send/recv cannot deadlock.
#include "parallel/pp/schedule.hpp"

namespace parallel {

void run_gpipe(StageSteps& stage) {
  const int M = stage.micro_batches();
  for (int m = 0; m < M; ++m) {
    stage.recv_forward(m);
    stage.forward(m);
    stage.send_forward(m);
  }
  for (int m = 0; m < M; ++m) {
    stage.recv_backward(m);
    stage.backward(m);
    stage.send_backward(m);
  }
}

}  // namespace parallel
