#include "parallel/pp_stage.hpp"

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

nn::GPTPart stage_part(const std::vector<int>& layers, int stage) {
  const int first = std::accumulate(layers.begin(), layers.begin() + stage, 0);
  return {stage == 0, first, first + layers[static_cast<std::size_t>(stage)],
          stage == static_cast<int>(layers.size()) - 1};
}

PipelineStage::PipelineStage(StageModel& model, comm::Communicator& pp_group, int micro_batches, int micro_batch,
                             int block_size)
    : model_(model),
      pp_(pp_group),
      M_(micro_batches),
      b_(micro_batch),
      T_(block_size),
      activation_shape_(model.activation_shape(micro_batch, block_size)),
      tapes_(static_cast<std::size_t>(micro_batches)),
      inputs_(static_cast<std::size_t>(micro_batches)),
      outputs_(static_cast<std::size_t>(micro_batches)),
      grad_outputs_(static_cast<std::size_t>(micro_batches)) {}

void PipelineStage::set_batch(std::span<const int32_t> ids, std::span<const int32_t> targets) {
  ids_.assign(ids.begin(), ids.end());
  targets_.assign(targets.begin(), targets.end());
}

void PipelineStage::start_step() {
  loss_sum_ = 0;
  times_ = {};
  peak_in_flight_ = in_flight_;
}

void PipelineStage::forward(int m) {
  const double start = now_s();
  if (before_forward) before_forward(m);
  const auto i = static_cast<std::size_t>(m);
  const std::size_t rows = static_cast<std::size_t>(b_) * T_;
  {
    nn::autograd::TapeScope scope(tapes_[i]);
    nn::Tensor x = is_first() ? model_.embed(std::span(ids_).subspan(i * rows, rows), b_, T_) : inputs_[i];
    x = model_.run_blocks(x);
    if (is_last()) {
      nn::Tensor loss = model_.head_loss(x, std::span(targets_).subspan(i * rows, rows));
      loss_sum_ += loss.item() / static_cast<float>(M_);
      x = nn::scale(loss, 1.0f / static_cast<float>(M_));  // the step's gradient: the mean over micro-batches
    }
    outputs_[i] = x;
  }
  peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
  times_.forward += now_s() - start;
  if (on_span) on_span(fmt::format("F{}", m), StageSpan::forward, start, now_s());
}

void PipelineStage::backward(int m) {
  if (before_backward) before_backward(m);
  const double start = now_s();
  const auto i = static_cast<std::size_t>(m);
  {
    nn::autograd::TapeScope scope(tapes_[i]);
    if (is_last())
      nn::autograd::backward(outputs_[i]);
    else
      nn::autograd::backward(outputs_[i], grad_outputs_[i]);
  }
  outputs_[i] = nn::Tensor{};  // m's activations are freed with its tape; its input's gradient waits to be sent
  --in_flight_;
  times_.backward += now_s() - start;
  if (on_span) on_span(fmt::format("B{}", m), StageSpan::backward, start, now_s());
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

void PipelineStage::recv_forward(int m) {
  if (is_first()) return;
  const auto i = static_cast<std::size_t>(m);
  inputs_[i] = new_input();
  exchange({}, -1, inputs_[i].values(), pp_.rank() - 1, "recv x");
}

void PipelineStage::send_forward(int m) {
  if (is_last() || skip_sends) return;
  exchange(outputs_[static_cast<std::size_t>(m)].values(), pp_.rank() + 1, {}, -1, "send x");
}

void PipelineStage::recv_backward(int m) {
  if (is_last()) return;
  auto& g = grad_outputs_[static_cast<std::size_t>(m)];
  g.resize(static_cast<std::size_t>(nn::numel_of(activation_shape_)));
  exchange({}, -1, g, pp_.rank() + 1, "recv dx");
}

void PipelineStage::send_backward(int m) {
  if (is_first()) return;
  const auto i = static_cast<std::size_t>(m);
  exchange(inputs_[i].grad_values(), pp_.rank() - 1, {}, -1, "send dx");
  inputs_[i] = nn::Tensor{};
}

void PipelineStage::send_forward_recv_backward(int send_m, int recv_m) {
  if (is_last()) return;
  auto& g = grad_outputs_[static_cast<std::size_t>(recv_m)];
  g.resize(static_cast<std::size_t>(nn::numel_of(activation_shape_)));
  std::span<const float> out = outputs_[static_cast<std::size_t>(send_m)].values();
  exchange(skip_sends ? std::span<const float>() : out, pp_.rank() + 1, g, pp_.rank() + 1, "send x, recv dx");
}

void PipelineStage::send_backward_recv_forward(int send_m, int recv_m) {
  if (is_first()) return;
  const auto s = static_cast<std::size_t>(send_m), r = static_cast<std::size_t>(recv_m);
  inputs_[r] = new_input();
  exchange(inputs_[s].grad_values(), pp_.rank() - 1, inputs_[r].values(), pp_.rank() - 1, "send dx, recv x");
  inputs_[s] = nn::Tensor{};
}

}  // namespace parallel
