// What each rank holds in the first training step, for the log and the benchmarks: its
// parameters, their gradients and the optimizer's moments (the slices or shards it owns),
// and the step's peak from the allocator (nn::BufferPool) — above the step's start, the
// activations and buffers.
//   memory rank 1 (allocator): parameters 1.2 MiB, gradients 1.2 MiB, optimizer 2.4 MiB = 4.8 MiB;
//   step peak 9.0 MiB, 3.1 MiB above the step's start (activations, buffers)
#pragma once
#include <string>

#include "comm/communicator.hpp"
#include "nn/recompute.hpp"
#include "parallel/dp/zero_optimizer.hpp"

namespace trainers {

class StepMemory {
 public:
  void step_begins();  // resets the allocator's peak
  // Collective over `world`: rank 0 prints one line per rank. `formula` follows the sum
  // (train_dp: " (ZeRO-1 formula 3.1 MiB)").
  void report(const parallel::HeldBytes& held, const std::string& formula_name, double formula_bytes, nn::Recompute recompute,
              comm::Communicator& world) const;

 private:
  double at_start_ = 0;
};

}  // namespace trainers
