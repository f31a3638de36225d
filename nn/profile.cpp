#include "nn/profile.hpp"

#include <atomic>
#include <cassert>
#include <chrono>
#include <cstring>

#include <omp.h>

namespace nn::profile {
namespace {

std::atomic<bool> profiling{false};
std::vector<Row> recorded;                      // the model's thread only (see profile.hpp)
thread_local Scope* innermost = nullptr;        // the Scope open now on this thread
thread_local Pass current_pass = Pass::forward;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Row& row_of(const char* kind, Pass pass) {
  for (Row& row : recorded)
    if (row.pass == pass && row.kind == kind) return row;
  recorded.push_back(Row{kind, pass});
  return recorded.back();
}

}  // namespace

const char* name_of(Pass pass) {
  switch (pass) {
    case Pass::forward:
      return "forward";
    case Pass::backward:
      return "backward";
    case Pass::recompute:
      return "recompute";
    case Pass::update:
      return "update";
  }
  return "?";
}

void enable(bool on) { profiling.store(on, std::memory_order_relaxed); }
bool enabled() { return profiling.load(std::memory_order_relaxed); }
void reset() { recorded.clear(); }
std::vector<Row> rows() { return recorded; }

InPass::InPass(Pass pass) : previous_(current_pass) { current_pass = pass; }
InPass::~InPass() { current_pass = previous_; }

Scope::Scope(const char* kind, double bytes, double flops)
    : on_(enabled()), kind_(kind), pass_(Pass::forward), bytes_(bytes), flops_(flops) {
  if (!on_) return;
  assert(!omp_in_parallel() && "profile scopes record from the model's thread only");
  pass_ = current_pass;
  outer_ = innermost;
  innermost = this;
  start_ns_ = now_ns();
}

Scope::~Scope() {
  if (!on_) return;
  const int64_t elapsed = now_ns() - start_ns_;
  innermost = outer_;
  if (outer_) outer_->inner_ns_ += elapsed;
  Row& row = row_of(kind_, pass_);
  row.seconds += static_cast<double>(elapsed - inner_ns_) * 1e-9;
  row.bytes += bytes_;
  row.flops += flops_;
  ++row.calls;
}


}  // namespace nn::profile
