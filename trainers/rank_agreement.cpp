#include "trainers/rank_agreement.hpp"

#include <array>
#include <cstdint>
#include <exception>
#include <span>
#include <vector>

#include "comm/error.hpp"

namespace trainers {

// Runs `work` on rank 0. If it throws, every rank stops with rank 0's message (exit 2) —
// instead of the other ranks waiting forever for what rank 0 was about to send them.
void on_rank0_then_agree(comm::Communicator& world, const std::function<void()>& work) {
  std::array<int32_t, 1> failed{0};
  std::string message;
  if (world.rank() == 0) {
    try {
      work();
    } catch (const std::exception& e) {
      failed[0] = 1;
      message = e.what();
    }
  }
  world.broadcast(std::span<int32_t>(failed), 0);
  if (failed[0]) throw comm::UsageError(message);  // printed once, by rank 0
}

// Rank 0's string on every rank (a length, then the bytes as int32s).
void broadcast_text(comm::Communicator& world, std::string& text) {
  std::array<int64_t, 1> size{static_cast<int64_t>(text.size())};
  world.broadcast(std::span<int64_t>(size), 0);
  std::vector<int32_t> chars(text.begin(), text.end());
  chars.resize(static_cast<std::size_t>(size[0]));
  world.broadcast(std::span<int32_t>(chars), 0);
  text.assign(chars.begin(), chars.end());
}

float mean_over(comm::Communicator& group, float value) {
  std::array<float, 1> mean{value};
  group.allreduce(std::span<float>(mean), comm::ReduceOp::avg);
  return mean[0];
}

}  // namespace trainers
