// Replicas that start the same and stay the same: data parallelism's first rule (every replica
// takes the same step from the same parameters, so they never need comparing again) — and
// the check mode's proof that they did start the same.
#pragma once
#include <vector>

#include "comm/communicator.hpp"
#include "nn/adamw.hpp"
#include "nn/gpt.hpp"

namespace parallel {

// Rank 0's parameters (and optimizer moments and step) on every rank of `group`.
void broadcast_state(nn::GPT& model, nn::AdamW* optimizer, comm::Communicator& group);
void broadcast_state(std::vector<nn::NamedTensor>& parameters, nn::AdamW* optimizer, comm::Communicator& group);

// Check mode: every rank hashes its parameters and compares with rank 0's (a one-line error
// naming the ranks that differ).
void verify_identical(const nn::GPT& model, comm::Communicator& group);

}  // namespace parallel
