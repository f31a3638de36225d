// A per-op profile of training steps (gpt_bench --profile): for every kind of work — each GEMM
// family, the attention core, layernorm, GELU, cross-entropy, residual adds, casts, AdamW … —
// forward and backward apart, the time spent in it and the bytes or FLOPs it had to move, so
// each can be set against the machine's roofline (GEMM peak, memory bandwidth).
//
// An op opens a Scope for its forward and another inside its backward closure; the pass is the
// one running (autograd's backward says when it runs; the optimizer's caller says InPass(update)):
//
//   Tensor gelu(const Tensor& x) {
//     profile::Scope scope("gelu", /*bytes=*/8.0 * x.numel());   // read x, write y
//
// The linear layers' GEMMs are told their family by the model (linear's last argument:
// "GEMM attn.c_attn", "GEMM mlp.c_fc", "GEMM lm_head" …). Time is exclusive: a Scope opened inside another (a cast inside a linear layer, an allocation
// inside anything) is subtracted from the outer one, so the rows add up to the step. Off (the
// default) a Scope costs a call and one load of a flag. Only the thread that runs the model records (the
// ops' OpenMP teams run inside a Scope, not around one).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nn::profile {

// recompute: a forward replayed inside backward (--recompute, nn/recompute.hpp).
enum class Pass { forward, backward, recompute, update };
const char* name_of(Pass pass);

// The pass the Scopes opened while it lives belong to (forward outside any).
class InPass {
 public:
  explicit InPass(Pass pass);
  ~InPass();
  InPass(const InPass&) = delete;
  InPass& operator=(const InPass&) = delete;

 private:
  Pass previous_;
};

void enable(bool on);
bool enabled();
void reset();

struct Row {
  std::string kind;
  Pass pass;
  double seconds = 0;  // exclusive
  double bytes = 0;    // what an ideal kernel reads and writes (0 where FLOPs are the measure)
  double flops = 0;
  int64_t calls = 0;
};
// What was recorded since reset(), in first-seen order.
std::vector<Row> rows();

class Scope {
 public:
  explicit Scope(const char* kind, double bytes = 0, double flops = 0);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool on_;
  const char* kind_;
  Pass pass_;
  double bytes_, flops_;
  int64_t start_ns_ = 0;
  int64_t inner_ns_ = 0;  // time of the Scopes opened inside this one
  Scope* outer_ = nullptr;
};

}  // namespace nn::profile
