#include "trainers/step_memory.hpp"

#include <array>

#include "comm/runtime.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/memory_estimate.hpp"

namespace trainers {

void StepMemory::step_begins() {
  nn::BufferPool::reset_peak();
  at_start_ = static_cast<double>(nn::BufferPool::bytes_in_use());
}

void StepMemory::report(const std::vector<nn::NamedTensor>& parameters, comm::Communicator& world) const {
  double bytes = 0;
  for (const auto& p : parameters) bytes += 4.0 * static_cast<double>(p.tensor.numel());
  const double activations = static_cast<double>(nn::BufferPool::peak_bytes_in_use()) - at_start_;
  const std::array<double, 2> mine{bytes, activations};
  std::vector<double> all(mine.size() * static_cast<std::size_t>(world.size()));
  world.allgather(std::span<const double>(mine), std::span(all));
  if (world.rank() != 0) return;
  for (int r = 0; r < world.size(); ++r) {
    const double* m = all.data() + r * mine.size();
    comm::say("memory rank {} (allocator): parameters {}, gradients {}, optimizer {}; activations peak {}", r,
              nn::format_bytes(m[0]), nn::format_bytes(m[0]), nn::format_bytes(2 * m[0]), nn::format_bytes(m[1]));
  }
}

}  // namespace trainers
