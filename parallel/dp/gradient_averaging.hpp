// Averaging gradients across data-parallel ranks. Afterwards every rank holds the mean of all
// ranks' gradients, so every rank takes the same optimizer step from the same parameters.
//
//   naive     after backward, one blocking allreduce per parameter tensor, one after another:
//             simple, but every message pays the latency, and nothing overlaps with compute.
//   bucketed  PyTorch DDP's design. Parameters are grouped, in the order backward finishes
//             them (last layer first), into buckets of about bucket_bytes. When a bucket's last
//             gradient is final, its gradients are copied into one flat buffer whose
//             allreduce is started asynchronously, while backward goes on with earlier layers;
//             everything is waited for before the optimizer step.
//
//     backward:  ln_f │ block 3 │ block 2 │ block 1 │ block 0 │ embeddings
//     comm:             [bucket 0 ……]  [bucket 1 ……]  [bucket 2 ……]  [bucket 3] ← finish() waits
//
// With gradient accumulation only the last micro-step communicates (before_backward(false)
// leaves the others local), as DDP's no_sync(). `wire` bf16 (--grad-comm bf16) sends the
// gradients as bf16, half the bytes (parallel/dp/gradient_wire.hpp).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/types.hpp"
#include "nn/gpt.hpp"
#include "parallel/dp/gradient_wire.hpp"

namespace parallel {

class GradientAverager {
 public:
  virtual ~GradientAverager() = default;
  // Before each micro-step's backward: `communicate` is true on the last micro-step only.
  virtual void before_backward(bool communicate) = 0;
  // After the last backward: returns once every gradient holds the average over ranks.
  virtual void finish() = 0;
  virtual std::string describe() const = 0;
  // When each bucket's allreduce ran (bucket index, bytes, [start, end] in steady-clock ns), told
  // in finish() — what --trace draws on a rank's communication row. The naive one has no buckets.
  using BucketSeen = std::function<void(int bucket, std::size_t bytes, std::int64_t start_ns, std::int64_t end_ns)>;
  virtual void on_bucket_done(BucketSeen /*seen*/) {}
};

// --ddp: which averaging, and its names on the command line and in the checkpoint.
enum class DdpKind { naive, bucketed };
inline constexpr std::array<std::string_view, 2> kDdpKindNames = {"naive", "bucketed"};

// What an averager needs of a model: its parameter tensors (whose indices the hook reports)
// and a way to install the grad-ready hook (nn::GPT, whatever its layers).
struct GradientSource {
  std::vector<nn::Tensor> tensors;
  std::function<void(nn::GPT::GradReadyHook)> set_grad_ready_hook;
  static GradientSource of(nn::GPT& model);
};

// The bucketed one installs itself as the model's grad-ready hook (and removes it when destroyed).
std::unique_ptr<GradientAverager> make_gradient_averager(DdpKind kind, GradientSource model, comm::Communicator& world,
                                                         std::size_t bucket_bytes,
                                                         GradientWire wire = GradientWire::fp32);

// The simplest averaging, for any list of parameter tensors (train_3d's slices): every
// gradient packed into one buffer (in the `wire` type), one blocking allreduce (avg) over
// `group`, unpacked.
void average_gradients(std::vector<nn::NamedTensor>& parameters, comm::Communicator& group,
                       GradientWire wire = GradientWire::fp32);

}  // namespace parallel
