#include "parallel/dp/replicas.hpp"

#include <array>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "comm/runtime.hpp"
#include "nn/atomic_file.hpp"
#include "nn/error.hpp"
#include "numeric/hash.hpp"

namespace parallel {

void broadcast_state(nn::GPT& model, nn::AdamW* optimizer, comm::Communicator& world) {
  broadcast_state(model.parameters(), optimizer, world);
}

void broadcast_state(std::vector<nn::NamedTensor>& parameters, nn::AdamW* optimizer, comm::Communicator& world) {
  for (auto& p : parameters) world.broadcast(p.tensor.values(), 0);
  if (!optimizer) return;
  for (auto& m : optimizer->exp_avg()) world.broadcast(m.values(), 0);
  for (auto& v : optimizer->exp_avg_sq()) world.broadcast(v.values(), 0);
  std::array<int64_t, 1> steps{optimizer->steps()};
  world.broadcast(std::span<int64_t>(steps), 0);
  optimizer->set_steps(steps[0]);
}

// Check mode: every rank hashes its parameters and compares with rank 0's.
void verify_identical(const nn::GPT& model, comm::Communicator& world) {
  uint64_t hash = 0;
  for (const auto& p : model.parameters()) {
    auto v = p.tensor.values();
    hash = numeric::hash_combine(hash, nn::fnv1a64({reinterpret_cast<const char*>(v.data()), v.size_bytes()}));
  }
  std::vector<int64_t> all(static_cast<std::size_t>(world.size()));
  const std::array<int64_t, 1> mine{static_cast<int64_t>(hash)};
  world.allgather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  std::string differ;
  for (int r = 1; r < world.size(); ++r)
    if (all[static_cast<std::size_t>(r)] != all[0]) differ += fmt::format(" {}", r);
  if (!differ.empty()) nn::fail("check: after the broadcast, the parameters of rank(s){} differ from rank 0's", differ);
  comm::say("check: parameters identical on all {} ranks after the broadcast (hash {:016x})", world.size(), hash);
}

}  // namespace parallel
