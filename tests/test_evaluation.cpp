// The exact validation loss (trainers::full_split_loss) under mpiexec: the same number, to the
// last bit, whatever the rank count — users compare val_loss_full across runs and layouts.
// Each rank also computes it alone (a one-rank communicator) and the two must be equal.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/runtime.hpp"
#include "nn/gpt.hpp"
#include "nn/rng.hpp"
#include "trainers/evaluation.hpp"

namespace {

std::uint64_t bits_of(double x) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

}  // namespace

TEST_CASE("full_split_loss: the same bits on any rank count as on one rank") {
  comm::Communicator& world = comm::runtime().world();
  nn::GPTConfig config;
  config.n_layer = 1;
  config.n_head = 2;
  config.n_embd = 16;
  config.block_size = 8;
  config.vocab_size = 11;
  nn::GPT model(config, 7);
  // 211 windows of 8 (+1 target): 7 chunks of 32 windows, the last one short, and a share
  // per rank that falls inside chunks for every rank count here but 1.
  std::vector<std::int32_t> tokens(211 * 8 + 5);
  nn::Rng rng(3);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.next_u64() % 11);

  const double shared = trainers::full_split_loss(model, tokens, world);
  comm::Communicator alone = world.split(world.rank(), 0);
  const double by_myself = trainers::full_split_loss(model, tokens, alone);
  INFO("on " << world.size() << " ranks: " << shared << ", on one: " << by_myself);
  CHECK(bits_of(shared) == bits_of(by_myself));
  CHECK(shared > 1.0);
  CHECK(shared < 4.0);
}
