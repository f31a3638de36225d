// What each rank holds in the first training step, for the log and the parallelism
// benchmark: its parameters, their gradients and the optimizer's moments (the slices it owns),
// and the activations — the allocator's peak above the step's start (nn::BufferPool).
//   memory rank 1 (allocator): parameters 1.2 MiB, gradients 1.2 MiB, optimizer 2.4 MiB; activations peak 3.1 MiB
#pragma once
#include <vector>

#include "comm/communicator.hpp"
#include "nn/gpt.hpp"

namespace trainers {

class StepMemory {
 public:
  void step_begins();  // resets the allocator's peak
  // Collective over `world`: rank 0 prints one line per rank. `parameters`: what this rank
  // holds (and steps with AdamW: gradients of the same size, two moments each).
  void report(const std::vector<nn::NamedTensor>& parameters, comm::Communicator& world) const;

 private:
  double at_start_ = 0;
};

}  // namespace trainers
