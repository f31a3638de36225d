// Interleaved 1F1B (Megatron-LM's virtual pipeline stages, Narayanan et al. 2021): the model
// is cut into P·V chunks and stage r holds V of them, chunks r, r + P, r + 2P, … — so a
// micro-batch goes round the ring of stages V times. Each stage's pieces of work are V times
// smaller, and the pipeline fills and drains V times faster: the bubble shrinks from
// (P − 1)/(M + P − 1) to (P − 1)/(V·M + P − 1) of the step, for V times the point-to-point
// messages.
//
// Each stage runs its T = V·M forwards in this order (k = 0 … T − 1): micro-batches in
// groups of P, each group through chunk 0, then chunk 1, …:
//
//   forward k:   chunk (k mod P·V) / P,   micro-batch ⌊k / P·V⌋·P + k mod P
//   backward k:  chunk V − 1 − that,      the same micro-batch
//
// as W warm-up forwards, then one forward and one backward at a time, then W backwards:
//
//   W = min(T, 2·(P − r − 1) + (V − 1)·P)
//
//   P = 2, V = 2, M = 4 (F2b: forward of micro-batch 2 on chunk 1; "." waits)
//   stage 0   F0a F1a F0b F1b  .  F2a B0b F3a B1b F2b B0a F3b B1a B2b  .  B3b B2a B3a
//   stage 1    .  F0a F1a F0b B0b F1b B1b F2a B0a F3a B1a F2b B2b F3b B3b B2a B3a  .
//
// Messages: after forward k a stage sends its activation on (to r + 1, or from stage P − 1 to
// stage 0's next chunk) and receives the input of a later forward; after backward k it sends
// its input's gradient back and receives the gradient of a later backward. Each is one paired
// send_recv, forward direction first: with the backward exchange first, neighbours can both
// wait to send (pp/stage.hpp's deadlock rule; P = 2, V = 1, M = 2 deadlocks). Between a pair
// of stages the messages of each direction are received in the order they were sent.
//
// Per chunk the backwards run micro-batches 0, 1, …, M − 1, as in GPipe and 1F1B, so every
// parameter sums its gradient in the same order: bit-identical to them.
//
// --schedule gpipe with V > 1 is the same order with every forward a warm-up one (W = T): all
// forwards, then all backwards.
#include <algorithm>
#include <optional>

#include "parallel/pp/schedule.hpp"

namespace parallel {

void run_interleaved(StageSteps& stage, bool all_forwards_first) {
  const int P = stage.stages(), r = stage.stage(), V = stage.chunks(), M = stage.micro_batches();
  const int T = V * M, group = P * V;
  auto forward_slot = [&](int k) { return Slot{(k % group) / P, (k / group) * P + k % P}; };
  auto backward_slot = [&](int k) {
    Slot s = forward_slot(k);
    s.chunk = V - 1 - s.chunk;
    return s;
  };
  // What goes out after forward / backward k (nothing from the model's last / first chunk).
  auto sent_forward = [&](int k) -> std::optional<Slot> {
    const Slot s = forward_slot(k);
    return stage.last_chunk(s.chunk) ? std::nullopt : std::optional(s);
  };
  auto sent_backward = [&](int k) -> std::optional<Slot> {
    const Slot s = backward_slot(k);
    return stage.first_chunk(s.chunk) ? std::nullopt : std::optional(s);
  };
  // The input received after forward k: the next forward's (it comes from the previous stage's
  // forward k + 1), on stage 0 the input of a later chunk (stage P − 1's forward k − (P − 1),
  // unless that was the model's last chunk).
  auto next_input = [&](int k) -> std::optional<Slot> {
    if (r != 0) return k + 1 < T ? std::optional(forward_slot(k + 1)) : std::nullopt;
    const int j = k - (P - 1);
    if (j < 0 || forward_slot(j).chunk == V - 1) return std::nullopt;
    Slot s = forward_slot(j);
    ++s.chunk;
    return s;
  };
  // Mirrored: the gradient received after backward k.
  auto next_gradient = [&](int k) -> std::optional<Slot> {
    if (r != P - 1) return k + 1 < T ? std::optional(backward_slot(k + 1)) : std::nullopt;
    const int j = k - (P - 1);
    if (j < 0 || backward_slot(j).chunk == 0) return std::nullopt;
    Slot s = backward_slot(j);
    --s.chunk;
    return s;
  };
  const std::optional<Slot> first_gradient = r == P - 1 ? std::nullopt : std::optional(Slot{V - 1, 0});

  const int warmup = all_forwards_first ? T : std::min(T, 2 * (P - r - 1) + (V - 1) * P);
  stage.exchange_forward(std::nullopt, r == 0 ? std::nullopt : std::optional(Slot{0, 0}));
  for (int k = 0; k < warmup; ++k) {
    const Slot s = forward_slot(k);
    stage.forward(s.micro, s.chunk);
    stage.exchange_forward(sent_forward(k), k == T - 1 ? std::nullopt : next_input(k));
  }
  stage.exchange_backward(std::nullopt, first_gradient);
  for (int i = 0; i < T - warmup; ++i) {  // steady: one forward, one backward
    const int kf = warmup + i, kb = i;
    const Slot f = forward_slot(kf), b = backward_slot(kb);
    stage.forward(f.micro, f.chunk);
    stage.backward(b.micro, b.chunk);
    stage.exchange_forward(sent_forward(kf), kf == T - 1 ? std::nullopt : next_input(kf));
    stage.exchange_backward(sent_backward(kb), next_gradient(kb));
  }
  for (int k = T - warmup; k < T; ++k) {  // cool-down
    const Slot b = backward_slot(k);
    stage.backward(b.micro, b.chunk);
    stage.exchange_backward(sent_backward(k), k == T - 1 ? std::nullopt : next_gradient(k));
  }
}

}  // namespace parallel
