#include "trainers/step_memory.hpp"

#include <array>

#include "comm/runtime.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/recompute.hpp"

namespace trainers {

void StepMemory::step_begins() {
  nn::BufferPool::reset_peak();
  at_start_ = static_cast<double>(nn::BufferPool::bytes_in_use());
}

void StepMemory::report(const parallel::HeldBytes& held, const std::string& formula_name, double formula_bytes,
                        nn::Recompute recompute, comm::Communicator& world) const {
  const double peak = static_cast<double>(nn::BufferPool::peak_bytes_in_use());
  const std::array<double, 6> mine{held.parameters, held.gradients, held.optimizer, peak, peak - at_start_,
                                   formula_bytes};  // each rank's own formula (a pipeline's stages differ)
  std::vector<double> all(mine.size() * static_cast<std::size_t>(world.size()));
  world.allgather(std::span<const double>(mine), std::span(all));
  if (world.rank() != 0) return;
  for (int r = 0; r < world.size(); ++r) {
    const double* m = all.data() + r * mine.size();
    comm::say(
        "memory rank {} (allocator): parameters {}, gradients {}, optimizer {} = {}{}; step peak {}, {} above the "
        "step's start (activations, buffers; recompute {})",
        r, nn::format_bytes(m[0]), nn::format_bytes(m[1]), nn::format_bytes(m[2]), nn::format_bytes(m[0] + m[1] + m[2]),
        formula_name.empty() ? "" : fmt::format(" ({} formula {})", formula_name, nn::format_bytes(m[5])),
        nn::format_bytes(m[3]), nn::format_bytes(m[4]), nn::name_of(recompute));
  }
}

}  // namespace trainers
