// One stage of a pipeline: its piece of the model, its micro-batches in flight, and the
// exchange of activations with its neighbours.
//
//        stage 0                 stage 1                 stage P−1
//   ids ─ embed, blocks ─ x ─▶ blocks ─ x ─▶ … ─▶ blocks, ln_f, lm_head, loss
//        ◀─ ∂L/∂x ────────────  ◀─ ∂L/∂x ──────── ◀─ backward from the loss
//
// Forward of micro-batch m runs on its own autograd tape (several are alive at once under
// 1F1B); the activation x [b,T,C] it sends is received by the next stage as a fresh tensor
// that requires a gradient; backward of m starts from the gradient of its output that the
// next stage sent back (autograd::backward(output, grad)), and sends the gradient of its input
// on. The schedules (pp_gpipe, pp_1f1b) only decide the order of these calls.
//
// Deadlock rule: two neighbours must never both wait to send to each other. A send of a
// large message waits until the peer posts the matching receive; if stage r sends its next
// activation while stage r+1 sends back a gradient, both wait forever. So where the 1F1B
// schedule needs both directions, the stage sends and receives in one call (send_recv:
// MPI_Sendrecv under the mpi backend), which pairs with the neighbour's mirror call.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/autograd.hpp"
#include "nn/gpt.hpp"
#include "nn/tensor.hpp"
#include "parallel/stage_model.hpp"

namespace parallel {

// How n_layer blocks are split over P stages: `given` (e.g. 3,2,2,1: must sum to n_layer, no
// zeros), or evenly (the first n_layer % P stages take one more). Throws comm::UsageError.
std::vector<int> stage_layers(int n_layer, int stages, const std::vector<int>& given);
// Stage s's piece: stage 0 has the embedding, the last stage the head.
nn::GPTPart stage_part(const std::vector<int>& layers, int stage);

// Where the time of a step went on this stage, for the log's bubble and the trace.
struct StageTimes {
  double forward = 0, backward = 0;
  double wait = 0;  // blocked in send/recv: the bubble plus transfer time
  double compute() const { return forward + backward; }
};

// What a stage reports to --trace: the spans it times.
enum class StageSpan { forward, backward, wait };

class PipelineStage {
 public:
  // `micro_batch` rows of `block_size` tokens per micro-batch, `micro_batches` of them per step.
  PipelineStage(StageModel& model, comm::Communicator& pp_group, int micro_batches, int micro_batch, int block_size);

  bool is_first() const { return pp_.rank() == 0; }
  bool is_last() const { return pp_.rank() == pp_.size() - 1; }
  int micro_batches() const { return M_; }
  int stage() const { return pp_.rank(); }
  int stages() const { return pp_.size(); }

  // The step's data: rows [m·b, (m+1)·b) of ids/targets [M·b, T] are micro-batch m.
  void set_batch(std::span<const int32_t> ids, std::span<const int32_t> targets);
  // Called before each forward: sets the model's dropout stream for micro-batch m.
  std::function<void(int m)> before_forward;

  // Compute, on micro-batch m's tape.
  void forward(int m);   // first: embed(ids_m); blocks; last: loss_m / M
  void backward(int m);  // last: from the loss; others: from the gradient received; frees m

  // Point-to-point with the neighbours (no-ops where there is none).
  void recv_forward(int m);
  void send_forward(int m);
  void recv_backward(int m);
  void send_backward(int m);
  void send_forward_recv_backward(int send_m, int recv_m);  // one paired call: see the deadlock rule
  void send_backward_recv_forward(int send_m, int recv_m);

  // Last stage: Σ over micro-batches of loss_m (the step's mean loss); 0 elsewhere.
  float loss() const { return loss_sum_; }
  // Micro-batches whose activations are held now / at most since start_step().
  int peak_in_flight() const { return peak_in_flight_; }
  void start_step();  // resets the loss, the times and the peak
  const StageTimes& times() const { return times_; }

  // For --trace: called with (name, kind, start, end in seconds) of every forward,
  // backward and wait in send/recv.
  std::function<void(const std::string&, StageSpan, double, double)> on_span;
  // Fault injection for the tests and the lecture: while true, activations are not sent on
  // (the bug "a stage skips a send"); the next stage waits, and the watchdog names this one.
  bool skip_sends = false;
  // Called before each backward (the data-parallel averager arms itself on the last one).
  std::function<void(int m)> before_backward;

 private:
  void exchange(std::span<const float> out, int dest, std::span<float> in, int source, const char* what);
  nn::Tensor new_input() const { return nn::Tensor::empty(activation_shape_, /*requires_grad=*/true); }

  StageModel& model_;
  comm::Communicator& pp_;
  int M_, b_, T_;
  nn::Shape activation_shape_;  // of what passes between stages: [b,T,C] (or [b,T/tp,C])
  std::vector<int32_t> ids_, targets_;
  std::vector<nn::autograd::Tape> tapes_;
  std::vector<nn::Tensor> inputs_, outputs_;      // per micro-batch: received x, produced x (or loss)
  std::vector<std::vector<float>> grad_outputs_;  // per micro-batch: ∂L/∂output from the next stage
  std::vector<float> send_buffer_;
  float loss_sum_ = 0;
  int in_flight_ = 0, peak_in_flight_ = 0;
  StageTimes times_;
};

}  // namespace parallel
