#include "parallel/pp/stage.hpp"

#include <chrono>
#include <numeric>

#include <fmt/format.h>

#include "comm/runtime.hpp"
#include "nn/ops.hpp"

namespace parallel {
namespace {

double now_s() {  // the clock of trainers::Trace
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<int> stage_layers(int n_layer, int stages, const std::vector<int>& given) {
  if (stages > n_layer)
    throw comm::UsageError(
        fmt::format("{} pipeline stages for {} blocks: every stage needs at least one block "
                    "(use fewer ranks, a larger --dp, or more --n-layer)",
                    stages, n_layer));
  if (given.empty()) {
    std::vector<int> layers(static_cast<std::size_t>(stages), n_layer / stages);
    for (int s = 0; s < n_layer % stages; ++s) ++layers[static_cast<std::size_t>(s)];
    return layers;
  }
  if (static_cast<int>(given.size()) != stages)
    throw comm::UsageError(
        fmt::format("--stage-layers lists {} stages, but the pipeline has {}", given.size(), stages));
  for (int n : given)
    if (n < 1) throw comm::UsageError(fmt::format("--stage-layers: every stage needs at least one block, got {}", n));
  if (const int sum = std::accumulate(given.begin(), given.end(), 0); sum != n_layer)
    throw comm::UsageError(
        fmt::format("--stage-layers adds up to {} blocks, but the model has n_layer = {}", sum, n_layer));
  return given;
}

nn::GPTPart stage_part(const std::vector<int>& layers, int stage, int stages) {
  nn::GPTPart part{.embedding = stage == 0, .chunks = {}, .head = stage == stages - 1};
  for (int s = stage; s < static_cast<int>(layers.size()); s += stages) {  // virtual stages r, r + P, …
    const int first = std::accumulate(layers.begin(), layers.begin() + s, 0);
    part.chunks.push_back({first, first + layers[static_cast<std::size_t>(s)]});
  }
  return part;
}

PipelineStage::PipelineStage(nn::GPT& model, comm::Communicator& pp_group, int micro_batches, int micro_batch,
                             int block_size)
    : model_(model),
      pp_(pp_group),
      M_(micro_batches),
      V_(static_cast<int>(model.part().chunks.size())),
      b_(micro_batch),
      T_(block_size),
      activation_shape_(model.activation_shape(micro_batch, block_size)),
      tapes_(static_cast<std::size_t>(micro_batches * V_)),
      inputs_(static_cast<std::size_t>(micro_batches * V_)),
      outputs_(static_cast<std::size_t>(micro_batches * V_)),
      grad_outputs_(static_cast<std::size_t>(micro_batches * V_)) {}

void PipelineStage::set_batch(std::span<const int32_t> ids, std::span<const int32_t> targets) {
  ids_.assign(ids.begin(), ids.end());
  targets_.assign(targets.begin(), targets.end());
}

void PipelineStage::start_step() {
  loss_sum_ = 0;
  times_ = {};
  peak_in_flight_ = in_flight_;
}

std::string PipelineStage::span_name(char kind, int m, int v) const {
  return V_ == 1 ? fmt::format("{}{}", kind, m) : fmt::format("{}{}c{}", kind, m, v);
}

void PipelineStage::forward(int m, int v) {
  const double start = now_s();
  if (before_forward) before_forward(m, v);
  const std::size_t i = index(m, v), rows = static_cast<std::size_t>(b_) * T_;
  const auto mine = static_cast<std::size_t>(m) * rows;
  model_.set_loss_scale(1.0f / static_cast<float>(M_));  // the mixtures' balancing losses: the same mean
  {
    nn::autograd::TapeScope scope(tapes_[i]);
    nn::Tensor x = first_chunk(v) ? model_.embed(std::span(ids_).subspan(mine, rows), b_, T_) : inputs_[i];
    x = model_.run_chunk(x, v);
    if (last_chunk(v)) {
      nn::Tensor loss = model_.head_loss(x, std::span(targets_).subspan(mine, rows));
      loss_sum_ += loss.item() / static_cast<float>(M_);
      x = nn::scale(loss, 1.0f / static_cast<float>(M_));  // the step's gradient: the mean over micro-batches
    }
    outputs_[i] = x;
  }
  peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
  times_.forward += now_s() - start;
  if (on_span) on_span(span_name('F', m, v), StageSpan::forward, start, now_s());
}

void PipelineStage::backward(int m, int v) {
  if (before_backward) before_backward(m);
  const double start = now_s();
  const std::size_t i = index(m, v);
  {
    nn::autograd::TapeScope scope(tapes_[i]);
    if (last_chunk(v))
      nn::autograd::backward(outputs_[i]);
    else
      nn::autograd::backward(outputs_[i], grad_outputs_[i]);
  }
  outputs_[i] = nn::Tensor{};  // the slot's activations are freed with its tape; its input's gradient waits to be sent
  --in_flight_;
  times_.backward += now_s() - start;
  if (on_span) on_span(span_name('B', m, v), StageSpan::backward, start, now_s());
}

void PipelineStage::exchange(std::span<const float> out, int dest, std::span<float> in, int source, const char* what) {
  const double start = now_s();
  if (!out.empty() && !in.empty())
    pp_.send_recv(out, dest, in, source);
  else if (!out.empty())
    pp_.send(out, dest);
  else if (!in.empty())
    pp_.recv(in, source);
  times_.wait += now_s() - start;
  if (on_span) on_span(what, StageSpan::wait, start, now_s());
}

std::span<float> PipelineStage::grad_output_buffer(std::size_t i) {
  grad_outputs_[i].resize(static_cast<std::size_t>(nn::numel_of(activation_shape_)));
  return grad_outputs_[i];
}

void PipelineStage::recv_forward(int m) {
  if (is_first()) return;
  const std::size_t i = index(m);
  inputs_[i] = new_input();
  exchange({}, -1, inputs_[i].values(), pp_.rank() - 1, "recv x");
}

void PipelineStage::send_forward(int m) {
  if (is_last() || skip_sends) return;
  exchange(outputs_[index(m)].values(), pp_.rank() + 1, {}, -1, "send x");
}

void PipelineStage::recv_backward(int m) {
  if (is_last()) return;
  exchange({}, -1, grad_output_buffer(index(m)), pp_.rank() + 1, "recv dx");
}

void PipelineStage::send_backward(int m) {
  if (is_first()) return;
  const std::size_t i = index(m);
  exchange(inputs_[i].grad_values(), pp_.rank() - 1, {}, -1, "send dx");
  inputs_[i] = nn::Tensor{};
}

void PipelineStage::send_forward_recv_backward(int send_m, int recv_m) {
  if (is_last()) return;
  std::span<const float> out = outputs_[index(send_m)].values();
  exchange(skip_sends ? std::span<const float>() : out, pp_.rank() + 1, grad_output_buffer(index(recv_m)),
           pp_.rank() + 1, "send x, recv dx");
}

void PipelineStage::send_backward_recv_forward(int send_m, int recv_m) {
  if (is_first()) return;
  const std::size_t s = index(send_m), r = index(recv_m);
  inputs_[r] = new_input();
  exchange(inputs_[s].grad_values(), pp_.rank() - 1, inputs_[r].values(), pp_.rank() - 1, "send dx, recv x");
  inputs_[s] = nn::Tensor{};
}

void PipelineStage::exchange_forward(std::optional<Slot> send, std::optional<Slot> recv) {
  const int next = (pp_.rank() + 1) % pp_.size(), previous = (pp_.rank() + pp_.size() - 1) % pp_.size();
  std::span<const float> out;
  if (send && !skip_sends) out = outputs_[index(send->micro, send->chunk)].values();
  std::span<float> in;
  if (recv) {
    const std::size_t r = index(recv->micro, recv->chunk);
    inputs_[r] = new_input();
    in = inputs_[r].values();
  }
  exchange(out, next, in, previous, send && recv ? "send x, recv x" : send ? "send x" : "recv x");
}

void PipelineStage::exchange_backward(std::optional<Slot> send, std::optional<Slot> recv) {
  const int next = (pp_.rank() + 1) % pp_.size(), previous = (pp_.rank() + pp_.size() - 1) % pp_.size();
  std::span<const float> out;
  if (send) out = inputs_[index(send->micro, send->chunk)].grad_values();
  std::span<float> in;
  if (recv) in = grad_output_buffer(index(recv->micro, recv->chunk));
  exchange(out, previous, in, next, send && recv ? "send dx, recv dx" : send ? "send dx" : "recv dx");
  if (send) inputs_[index(send->micro, send->chunk)] = nn::Tensor{};
}

}  // namespace parallel
