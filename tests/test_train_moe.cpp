// A mixture-of-experts GPT (nn/moe_mlp.hpp) through the trainers, under mpiexec: every layout
// that composes with it — data parallelism, accumulation, ZeRO, a pipeline, full recompute —
// ends where one process ends, having dropped the same choices; resume is exact; bad input is
// one line and exit status 2.
#include <fstream>
#include <iterator>

#include "trainer_test_util.hpp"

namespace {

CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }
CommandResult train_pp(int ranks, const std::string& args) { return run_trainer(TRAIN_PP, ranks, args); }
CommandResult train_tp(int ranks, const std::string& args) { return run_trainer(TRAIN_TP, ranks, args); }

constexpr float kTolerance = 2e-5f;  // as the data-parallel tests: float sums in another order

}  // namespace

TEST_CASE("a mixture of experts ends where one process ends: dp 2, accumulation, ZeRO-1 and 3, pp 2, full recompute") {
  auto reference = train_dp(1, tiny_moe() + " --batch-size 4 --out-dir " + out("moe_ref"));
  REQUIRE(reference.status == 0);
  CHECK_THAT(reference.output, Catch::Contains("mixture of experts: 4 experts in 2 of the 2 blocks (every 1), 2 per "
                                               "token, capacity ⌈1·2·16/4⌉ = 8 tokens of a sequence per expert"));
  const std::string routing = first_routing_line(reference.output);
  CHECK_THAT(routing, !Catch::Contains(" 0.0% of choices dropped"));  // capacity bites
  struct Layout {
    const char* name;
    int ranks;
    bool pipeline;
    std::string flags;
  };
  const Layout layouts[] = {
      {"moe_dp2", 2, false, "--batch-size 2"},
      {"moe_dp2_accum", 2, false, "--batch-size 1 --grad-accum 2"},  // the balancing loss averaged like the loss
      {"moe_zero1", 2, false, "--batch-size 2 --zero 1"},
      {"moe_zero3", 2, false, "--batch-size 2 --zero 3"},
      {"moe_pp2", 2, true, "--batch-size 4 --micro-batches 2"},
      {"moe_recompute", 1, false, "--batch-size 4 --recompute full"},
  };
  for (const Layout& l : layouts) {
    const std::string args = tiny_moe() + " " + l.flags + " --out-dir " + out(l.name);
    auto r = l.pipeline ? train_pp(l.ranks, args) : train_dp(l.ranks, args);
    REQUIRE(r.status == 0);
    const float diff = max_difference(checkpoint(l.name), checkpoint("moe_ref"));
    INFO(l.name << ": largest parameter difference from one process " << diff);
    CHECK(diff <= kTolerance);
    CHECK(first_routing_line(r.output) == routing);  // the same tokens per expert, dropped, balancing loss
  }
  SECTION("the comparison has teeth: without the balancing loss the run ends elsewhere") {
    auto other = train_dp(1, tiny_moe() + " --batch-size 4 --aux-loss-weight 0 --out-dir " + out("moe_no_aux"));
    REQUIRE(other.status == 0);
    CHECK(max_difference(checkpoint("moe_no_aux"), checkpoint("moe_ref")) > 10 * kTolerance);
  }
}

TEST_CASE("a mixture of experts resumes exactly, and its checkpoint keeps the experts' names") {
  const std::string run = tiny_moe() + " --batch-size 2 --lr-decay-iters 6 --max-iters 4";
  REQUIRE(train_dp(2, run + " --out-dir " + out("moe_straight")).status == 0);
  REQUIRE(train_dp(2, run + " --max-iters 2 --out-dir " + out("moe_split")).status == 0);
  auto resumed = train_dp(2, run + " --resume --out-dir " + out("moe_split"));
  REQUIRE(resumed.status == 0);
  CHECK(same_bytes(checkpoint("moe_straight") / "model.safetensors", checkpoint("moe_split") / "model.safetensors"));
  CHECK(same_bytes(checkpoint("moe_straight") / "optimizer.safetensors",
                   checkpoint("moe_split") / "optimizer.safetensors"));
  std::ifstream file(checkpoint("moe_straight") / "model.safetensors", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  CHECK_THAT(bytes, Catch::Contains("transformer.h.1.mlp.experts.3.c_proj.weight") &&
                        Catch::Contains("transformer.h.0.mlp.router.weight"));
  CHECK_THAT(bytes, !Catch::Contains("transformer.h.0.mlp.c_fc.weight"));
  // A dense run's flags against it: the checkpoint's config wins, named.
  usage_failure(train_dp(1, tiny(shakespeareish(), "data") + " --n-experts 2 --init-from " +
                                checkpoint("moe_straight").string() + " --out-dir " + out("moe_other")),
                "the checkpoint has n_experts=4 but the flags ask for n_experts=2");
}

TEST_CASE("bad mixture-of-experts input: one line, exit status 2") {
  const std::string run = tiny(shakespeareish(), "data") + " --out-dir " + out("moe_bad");
  usage_failure(train_dp(1, run + " --n-experts 2 --experts-per-token 3"),
                "experts_per_token must be from 1 to n_experts 2, got 3");
  usage_failure(train_dp(1, run + " --n-experts 2 --capacity-factor 0"), "--capacity-factor");
  usage_failure(train_dp(1, run + " --n-experts 2 --moe-every 3"), "moe_every must be from 1 to n_layer 2");
  usage_failure(train_dp(1, run + " --n-experts -1"), "--n-experts");
  usage_failure(train_tp(2, run + " --n-experts 2"),
                "--n-experts 2 with --tp 2: a mixture of experts runs on whole sequences and whole experts");
}
