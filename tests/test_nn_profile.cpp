// The per-op profile (nn/profile.hpp): off, it records nothing; on, one training step gives a
// row for every kind of work in its pass, with the FLOPs and bytes the ops declare, and
// exclusive times that add up to no more than the step.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/autograd.hpp"
#include "nn/gpt.hpp"
#include "nn/profile.hpp"

namespace {

using nn::profile::Pass;

const nn::profile::Row* find(const std::vector<nn::profile::Row>& rows, const std::string& kind, Pass pass) {
  for (const auto& row : rows)
    if (row.kind == kind && row.pass == pass) return &row;
  return nullptr;
}

// One step of a small GPT: forward, backward, AdamW (in the update pass); its seconds.
double one_step(nn::GPT& model, nn::AdamW& optimizer) {
  const int64_t B = 2, T = 16;
  std::vector<int32_t> ids(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = static_cast<int32_t>(i % 17), targets[i] = static_cast<int32_t>((i * 5) % 17);
  const auto start = std::chrono::steady_clock::now();
  nn::Tensor loss = model.loss(ids, targets, B, T);
  nn::autograd::backward(loss);
  {
    nn::profile::InPass update(Pass::update);
    optimizer.step(1e-3f);
    optimizer.zero_grad();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("profile: off records nothing; on, a step has a row per kind of work and pass") {
  nn::GPTConfig config;
  config.n_layer = 2, config.n_head = 2, config.n_embd = 16, config.block_size = 16, config.vocab_size = 17;
  nn::GPT model(config, 3);
  nn::AdamW optimizer(model.parameters());
  nn::profile::reset();
  one_step(model, optimizer);
  CHECK(nn::profile::rows().empty());

  nn::profile::enable(true);
  const double step = one_step(model, optimizer);
  nn::profile::enable(false);
  const auto rows = nn::profile::rows();
  for (const char* kind : {"layernorm", "gelu", "attention core", "GEMM attn.c_attn", "GEMM mlp.c_fc", "GEMM lm_head",
                           "embedding", "softmax + cross-entropy", "add (residual, position)", "add + layernorm"}) {
    INFO(kind);
    CHECK(find(rows, kind, Pass::forward) != nullptr);
    CHECK(find(rows, kind, Pass::backward) != nullptr);
  }
  const auto* fc = find(rows, "GEMM mlp.c_fc", Pass::forward);
  REQUIRE(fc != nullptr);
  CHECK(fc->calls == config.n_layer);
  CHECK(fc->flops == Approx(config.n_layer * 2.0 * (2 * 16) * 16 * 64));  // 2·rows·in·out per layer
  const auto* adamw = find(rows, "AdamW", Pass::update);
  REQUIRE(adamw != nullptr);
  double elements = 0;
  for (const auto& p : model.parameters()) elements += static_cast<double>(p.tensor.numel());
  CHECK(adamw->bytes == Approx(28.0 * elements));  // every parameter once
  CHECK(find(rows, "AdamW", Pass::forward) == nullptr);
  double counted = 0;
  for (const auto& row : rows) counted += row.seconds;
  CHECK(counted > 0);
  CHECK(counted <= step);  // exclusive times: nothing counted twice
  nn::profile::reset();
  CHECK(nn::profile::rows().empty());
}

TEST_CASE("profile: a scope inside another is taken out of the outer one's time") {
  nn::profile::reset();
  nn::profile::enable(true);
  const auto start = std::chrono::steady_clock::now();
  {
    nn::profile::Scope outer("outer");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    nn::profile::Scope inner("inner", 100.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nn::profile::enable(false);
  const auto rows = nn::profile::rows();
  const auto* outer = find(rows, "outer", Pass::forward);
  const auto* inner = find(rows, "inner", Pass::forward);
  REQUIRE(outer != nullptr);
  REQUIRE(inner != nullptr);
  CHECK(inner->seconds >= 0.030);  // sleeps last at least what they ask
  CHECK(outer->seconds >= 0.005);
  CHECK(outer->seconds + inner->seconds <= wall);  // counted once: with the inner time in it, 30 ms over
  CHECK(inner->bytes == 100.0);
  nn::profile::reset();
}
