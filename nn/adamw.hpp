// AdamW exactly as torch.optim.AdamW (PyTorch 1.13, the default single-tensor path):
//
//   p ← p · (1 − lr·wd)                                  decoupled weight decay
//   m ← β1·m + (1−β1)·g          v ← β2·v + (1−β2)·g²   (in this order of operations)
//   p ← p − (lr / (1−β1ᵗ)) · m / (√v / √(1−β2ᵗ) + ε)      bias-corrected step
//
// Weight decay applies only to tensors with ≥ 2 dimensions (matrices and embeddings), as
// nanoGPT configures it: biases and LayerNorm weights are not decayed.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "nn/gpt.hpp"

namespace nn {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;  // PyTorch's default; nanoGPT uses 0.1
};

// The numbers one update uses besides the tensors: from the config, the step count t (≥ 1)
// and the learning rate — computed as PyTorch does (the corrections in double).
struct AdamWScalars {
  float beta1, beta2, eps, step_size, correction2_sqrt, lr, weight_decay;
  static AdamWScalars at(const AdamWConfig& config, int64_t step, float lr);
  // The factor decoupled weight decay multiplies a weight by: only matrices and embeddings decay.
  float decay(bool has_two_dims) const { return has_two_dims ? 1.0f - lr * weight_decay : 1.0f; }
};

// One AdamW update of n elements in place (w, m, v; g is read): what a ZeRO rank runs on its
// shard, and AdamW::step on each tensor under AdamWKernel::per_tensor. It and the fused pass
// below share one element loop (nn/adamw.cpp), compiled so that an element's update is the
// same bits wherever a shard or a thread's share starts (tests/test_nn_gpt.cpp).
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float decay, const AdamWScalars& s);

// One tensor's part in a fused update: its weights, gradient, moments and decay factor.
struct AdamWTensor {
  float* w;
  const float* g;
  float *m, *v;
  int64_t n;
  float decay;
};
// The update of every tensor in one pass (PyTorch's fused/foreach AdamW): one thread team over
// the tensors laid end to end, each thread a contiguous share of all their elements, instead
// of a team (or one thread) per tensor. Each element sees adamw_update's arithmetic: the same bits.
void adamw_update_fused(const std::vector<AdamWTensor>& tensors, const AdamWScalars& s);

// How AdamW::step runs: fused (all tensors in one pass) or per tensor (adamw_update on each,
// the reference, and the speed ladder's rung before "fused AdamW").
enum class AdamWKernel { fused, per_tensor };
inline constexpr std::array<std::string_view, 2> kAdamWKernelNames = {"fused", "per-tensor"};

class AdamW {
 public:
  AdamW(std::vector<NamedTensor> parameters, AdamWConfig config = {}, AdamWKernel kernel = AdamWKernel::fused);

  void step(float lr);  // one update from the parameters' current gradients
  void zero_grad();

  int64_t steps() const { return steps_; }
  const AdamWConfig& config() const { return config_; }
  const std::vector<NamedTensor>& parameters() const { return parameters_; }
  // Moments, one tensor per parameter, in the same order (for checkpoints).
  std::vector<Tensor>& exp_avg() { return exp_avg_; }
  std::vector<Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  const std::vector<Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  void set_steps(int64_t steps) { steps_ = steps; }

 private:
  std::vector<NamedTensor> parameters_;
  AdamWConfig config_;
  AdamWKernel kernel_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  std::vector<AdamWTensor> fused_tensors_;  // the fused pass's list, rebuilt each step
  int64_t steps_ = 0;
};

}  // namespace nn
