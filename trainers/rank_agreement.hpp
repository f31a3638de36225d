// What every rank must agree on, and how: rank 0 does the work that may fail, everyone hears
// the outcome (so no rank waits for what rank 0 will never send).
#pragma once
#include <functional>
#include <string>

#include "comm/communicator.hpp"

namespace trainers {

// Runs `work` on rank 0. If it throws, every rank stops with rank 0's message (exit 2) —
// instead of the other ranks waiting forever for what rank 0 was about to send them.
void on_rank0_then_agree(comm::Communicator& world, const std::function<void()>& work);

// The mean of `value` over the ranks of `group`, on every rank.
float mean_over(comm::Communicator& group, float value);

// Rank 0's string on every rank.
void broadcast_text(comm::Communicator& world, std::string& text);

}  // namespace trainers
