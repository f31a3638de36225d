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
// on. The schedules (pp/schedule_gpipe.cpp, schedule_1f1b.cpp, schedule_interleaved.cpp) only
// decide the order of these calls.
//
// Deadlock rule: two neighbours must never both wait to send to each other. A send of a
// large message waits until the peer posts the matching receive; if stage r sends its next
// activation while stage r+1 sends back a gradient, both wait forever. So where the 1F1B
// schedule needs both directions, the stage sends and receives in one call (send_recv:
// MPI_Sendrecv under the mpi backend), which pairs with the neighbour's mirror call.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/autograd.hpp"
#include "nn/gpt.hpp"
#include "nn/tensor.hpp"

namespace parallel {

// How n_layer blocks are split over `stages` (P, or P·V virtual stages under interleaved 1F1B)
// in model order: `given` (e.g. 3,2,2,1: must sum to n_layer, no zeros), or evenly (the
// first n_layer % stages take one more). Throws comm::UsageError.
std::vector<int> stage_layers(int n_layer, int stages, const std::vector<int>& given);
// Stage r of `stages` (P): the virtual stages r, r + P, … of `layers` (one chunk each); stage 0
// has the embedding, stage P − 1 the head.
nn::GPTPart stage_part(const std::vector<int>& layers, int stage, int stages);

// Where the time of a step went on this stage, for the log's bubble and the trace.
struct StageTimes {
  double forward = 0, backward = 0;
  double wait = 0;  // blocked in send/recv: the bubble plus transfer time
  double compute() const { return forward + backward; }
};

// What a stage reports to --trace: the spans it times.
enum class StageSpan { forward, backward, wait };

// Under interleaved 1F1B a stage holds V chunks of blocks (model chunks r, r + P, …: see
// parallel/pp/schedule_interleaved.cpp). Chunk v of micro-batch m is a slot with its own tape; the
// activation of chunk v on stage P − 1 goes on to chunk v + 1 on stage 0, and its gradient
// comes back the same way. With V = 1 (GPipe, 1F1B) every slot is chunk 0.
struct Slot {
  int chunk = 0, micro = 0;
};

// What a schedule drives (parallel/pp/schedule.hpp): one stage's compute and its exchanges with
// its neighbours, in the order the schedule calls them. PipelineStage below is the real one;
// tests/test_pipeline_schedules.cpp drives a recording one to check each schedule's order
// against the pictures the docs draw.
class StageSteps {
 public:
  virtual ~StageSteps() = default;
  virtual int micro_batches() const = 0;
  virtual int chunks() const = 0;
  virtual int stage() const = 0;
  virtual int stages() const = 0;
  // Compute, micro-batch m on chunk v.
  virtual void forward(int m, int v = 0) = 0;
  virtual void backward(int m, int v = 0) = 0;
  // Point-to-point with the neighbours (no-ops where there is none), chunk 0 (GPipe, 1F1B).
  virtual void recv_forward(int m) = 0;
  virtual void send_forward(int m) = 0;
  virtual void recv_backward(int m) = 0;
  virtual void send_backward(int m) = 0;
  virtual void send_forward_recv_backward(int send_m, int recv_m) = 0;  // one paired call: the deadlock rule
  virtual void send_backward_recv_forward(int send_m, int recv_m) = 0;
  // Interleaved 1F1B: one paired call each way around the ring of stages (P − 1 → 0 for the
  // next chunk). Forward: send `send`'s activation to the next stage, receive `recv`'s from the
  // previous one. Backward: send `send`'s input gradient to the previous stage, receive
  // `recv`'s output gradient from the next one. Either may be none.
  virtual void exchange_forward(std::optional<Slot> send, std::optional<Slot> recv) = 0;
  virtual void exchange_backward(std::optional<Slot> send, std::optional<Slot> recv) = 0;
  // Where the model's first chunk and its last chunk are: no input to receive, no output to send.
  bool first_chunk(int v) const { return stage() == 0 && v == 0; }
  bool last_chunk(int v) const { return stage() == stages() - 1 && v == chunks() - 1; }
};

class PipelineStage final : public StageSteps {
 public:
  // `micro_batch` rows of `block_size` tokens per micro-batch, `micro_batches` of them per step;
  // `model`: the stage's part of nn::GPT (whole blocks or tensor-parallel ones), its chunks
  // model.part().chunks.
  PipelineStage(nn::GPT& model, comm::Communicator& pp_group, int micro_batches, int micro_batch, int block_size);

  bool is_first() const { return pp_.rank() == 0; }
  bool is_last() const { return pp_.rank() == pp_.size() - 1; }
  int micro_batches() const override { return M_; }
  int chunks() const override { return V_; }
  int stage() const override { return pp_.rank(); }
  int stages() const override { return pp_.size(); }

  // The step's data: rows [m·b, (m+1)·b) of ids/targets [M·b, T] are micro-batch m.
  void set_batch(std::span<const int32_t> ids, std::span<const int32_t> targets);
  // Called before each forward of micro-batch m (on chunk v): sets the model's dropout batch
  // (nn::DropoutBatch: the chunk does not change the masks, the layers' numbers do).
  std::function<void(int m, int v)> before_forward;

  // Compute, on the slot's tape.
  void forward(int m, int v = 0) override;   // first chunk of the model: embed(ids_m); blocks; last: loss_m / M
  void backward(int m, int v = 0) override;  // last chunk: from the loss; others: from the gradient received
  void recv_forward(int m) override;
  void send_forward(int m) override;
  void recv_backward(int m) override;
  void send_backward(int m) override;
  void send_forward_recv_backward(int send_m, int recv_m) override;
  void send_backward_recv_forward(int send_m, int recv_m) override;
  void exchange_forward(std::optional<Slot> send, std::optional<Slot> recv) override;
  void exchange_backward(std::optional<Slot> send, std::optional<Slot> recv) override;

  // Last stage: Σ over micro-batches of loss_m (the step's mean loss); 0 elsewhere.
  float loss() const { return loss_sum_; }
  // Slots (micro-batches × chunks) whose activations are held now / at most since start_step().
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
  std::size_t index(int m, int v = 0) const { return static_cast<std::size_t>(v * M_ + m); }
  std::span<float> grad_output_buffer(std::size_t i);  // sized to the activation
  std::string span_name(char kind, int m, int v) const;  // "F3", or "F3c1" with chunks

  nn::GPT& model_;  // this stage's part of the one model (GPTPart: its chunks)
  comm::Communicator& pp_;
  int M_, V_, b_, T_;
  nn::Shape activation_shape_;  // of what passes between stages: [b,T,C] (or [b,T/tp,C])
  std::vector<int32_t> ids_, targets_;
  std::vector<nn::autograd::Tape> tapes_;         // per slot, v·M + m:
  std::vector<nn::Tensor> inputs_, outputs_;      //   received x, produced x (or loss)
  std::vector<std::vector<float>> grad_outputs_;  //   ∂L/∂output from the next stage
  std::vector<float> send_buffer_;
  float loss_sum_ = 0;
  int in_flight_ = 0, peak_in_flight_ = 0;
  StageTimes times_;
};

}  // namespace parallel
