#include "parallel/dp/gradient_averaging.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "parallel/dp/gradient_wire.hpp"

namespace parallel {
namespace {


// "Not used in practice, but the starting point": N blocking allreduces after backward.
class NaiveAllreduce : public GradientAverager {
 public:
  NaiveAllreduce(GradientSource model, comm::Communicator& world, GradientWire wire)
      : model_(std::move(model)), world_(world), wire_(wire) {}
  void before_backward(bool) override {}
  void finish() override {
    for (auto& p : model_.tensors) average_on_wire(p.grad_values(), world_, wire_, scratch_);
  }
  std::string describe() const override {
    return fmt::format("naive: {} blocking allreduces per step, after backward{}", model_.tensors.size(),
                       wire_note(wire_));
  }

 private:
  GradientSource model_;
  comm::Communicator& world_;
  GradientWire wire_;
  WireBuffer scratch_;  // one tensor's gradients on a bf16 wire
};

class BucketedAllreduce : public GradientAverager {
 public:
  BucketedAllreduce(GradientSource model, comm::Communicator& world, std::size_t bucket_bytes, GradientWire wire)
      : model_(std::move(model)), world_(world), wire_(wire) {
    // Buckets in reverse parameter order: the order in which backward finalises gradients.
    const auto& params = model_.tensors;
    bucket_of_.assign(params.size(), 0);
    for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
      const std::size_t bytes = static_cast<std::size_t>(params[static_cast<std::size_t>(i)].numel()) * 4;
      if (buckets_.empty() || (buckets_.back().bytes > 0 && buckets_.back().bytes + bytes > bucket_bytes))
        buckets_.emplace_back();
      buckets_.back().params.push_back(i);
      buckets_.back().bytes += bytes;
      bucket_of_[static_cast<std::size_t>(i)] = static_cast<int>(buckets_.size()) - 1;
    }
    for (Bucket& b : buckets_) b.flat = WireBuffer(wire_, b.bytes / sizeof(float));
    model_.set_grad_ready_hook([this](std::span<const int> ready) { on_gradients_ready(ready); });
  }
  ~BucketedAllreduce() override { model_.set_grad_ready_hook({}); }
  BucketedAllreduce(const BucketedAllreduce&) = delete;
  BucketedAllreduce& operator=(const BucketedAllreduce&) = delete;

  void before_backward(bool communicate) override {
    communicating_ = communicate;
    // Armed once per step: under interleaved 1F1B each chunk's last backward communicates,
    // and a bucket that spans two chunks counts down across both.
    if (communicate && !armed_)
      for (Bucket& b : buckets_) b.waiting_for = b.params.size();
    armed_ = armed_ || communicate;
  }

  void finish() override {
    for (std::size_t i = 0; i < buckets_.size(); ++i)  // a parameter backward never reached
      if (!buckets_[i].started) start(i);
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      Bucket& b = buckets_[i];
      b.work.wait();
      if (seen_) seen_(static_cast<int>(i), b.bytes, b.work.ran_ns().first, b.work.ran_ns().second);
      copy_from_flat(b);
      b.started = false;
    }
    communicating_ = false;
    armed_ = false;
  }

  void on_bucket_done(BucketSeen seen) override { seen_ = std::move(seen); }

  std::string describe() const override {
    return fmt::format("bucketed: {} buckets of ≤ {:.2f} MB, allreduce overlapped with backward ({}){}",
                       buckets_.size(),
                       static_cast<double>(std::max_element(buckets_.begin(), buckets_.end(),
                                                            [](auto& a, auto& b) { return a.bytes < b.bytes; })
                                               ->bytes) /
                           1e6,
                       world_.async_on_thread() ? "moved by the communication thread" : "moved when backward tests it",
                       wire_note(wire_));
  }

 private:
  struct Bucket {
    std::vector<int> params;  // indices into model.parameters()
    std::size_t bytes = 0;
    WireBuffer flat;  // the bucket's gradients, back to back, in the wire's type
    std::size_t waiting_for = 0;
    bool started = false;
    comm::Work work;
  };

  // The grad-ready hook: runs inside backward, right after a group's last gradient step.
  void on_gradients_ready(std::span<const int> ready) {
    if (!communicating_) return;
    for (int p : ready) {
      const auto b = static_cast<std::size_t>(bucket_of_[static_cast<std::size_t>(p)]);
      if (--buckets_[b].waiting_for == 0) start(b);
    }
    // Give the allreduces in flight a chance to move (hand-written backends progress only
    // when asked; so does MPI without a progress thread).
    for (Bucket& b : buckets_)
      if (b.started) b.work.test();
  }

  void start(std::size_t index) {
    Bucket& b = buckets_[index];
    std::size_t at = 0;
    for (int p : b.params) {
      auto g = model_.tensors[static_cast<std::size_t>(p)].grad_values();
      b.flat.pack(g, at);
      at += g.size();
    }
    b.work = b.flat.allreduce_async(world_, comm::ReduceOp::avg);
    b.started = true;
  }

  void copy_from_flat(Bucket& b) {
    std::size_t at = 0;
    for (int p : b.params) {
      auto g = model_.tensors[static_cast<std::size_t>(p)].grad_values();
      b.flat.unpack(at, g);
      at += g.size();
    }
  }

  GradientSource model_;
  comm::Communicator& world_;
  GradientWire wire_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  bool communicating_ = false;
  bool armed_ = false;  // the countdowns were set for this step
  BucketSeen seen_;     // --trace's, or none
};

}  // namespace

GradientSource GradientSource::of(nn::GPT& model) {
  GradientSource source{.tensors = {}, .set_grad_ready_hook = [&model](nn::GPT::GradReadyHook hook) {
                          model.set_grad_ready_hook(std::move(hook));
                        }};
  for (const nn::NamedTensor& p : model.parameters()) source.tensors.push_back(p.tensor);
  return source;
}

std::unique_ptr<GradientAverager> make_gradient_averager(DdpKind kind, GradientSource model, comm::Communicator& world,
                                                         std::size_t bucket_bytes, GradientWire wire) {
  if (kind == DdpKind::naive) return std::make_unique<NaiveAllreduce>(std::move(model), world, wire);
  return std::make_unique<BucketedAllreduce>(std::move(model), world, bucket_bytes, wire);
}

void average_gradients(std::vector<nn::NamedTensor>& parameters, comm::Communicator& group, GradientWire wire) {
  std::vector<float> flat;
  for (const auto& p : parameters) flat.insert(flat.end(), p.tensor.grad(), p.tensor.grad() + p.tensor.numel());
  WireBuffer scratch;
  average_on_wire(flat, group, wire, scratch);
  auto at = flat.begin();
  for (auto& p : parameters) {
    std::copy_n(at, p.tensor.numel(), p.tensor.grad());
    at += p.tensor.numel();
  }
}

}  // namespace parallel
