// train_3d --ep end to end, under mpiexec: expert parallelism (parallel/ep/) — ep 2 and 4, ep
// smaller than dp, ep with a pipeline — ends where one process with every expert ends, having
// dropped the same choices; its checkpoint is the one nanoGPT-named file, which loads on any
// ep; a resumed run is byte-identical; a rank that skips a dispatch is named by the watchdog;
// bad input is one line and exit status 2.
#include "trainer_test_util.hpp"

namespace {

CommandResult train_3d(int ranks, const std::string& args) { return run_trainer(TRAIN_3D, ranks, args); }
CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }

constexpr float kTolerance = 2e-5f;  // as the data-parallel tests: float sums in another order

}  // namespace

TEST_CASE("expert parallelism ends where one process ends: ep 2, ep 4, ep < dp, ep × pp") {
  auto reference = train_dp(1, tiny_moe() + " --batch-size 4 --out-dir " + out("ep_ref"));
  REQUIRE(reference.status == 0);
  const std::string routing = first_routing_line(reference.output);
  struct Layout {
    int dp, ep, pp;
  };
  for (Layout l : {Layout{2, 2, 1}, Layout{4, 4, 1}, Layout{4, 2, 1}, Layout{2, 2, 2}}) {
    const std::string name = fmt::format("ep_d{}e{}p{}", l.dp, l.ep, l.pp);
    auto r = train_3d(l.dp * l.pp, tiny_moe() + fmt::format(" --dp {} --ep {} --pp {} --batch-size {} --micro-batches {} "
                                                       "--out-dir {}",
                                                       l.dp, l.ep, l.pp, 4 / l.dp, l.pp, out(name)));
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains(fmt::format("(ep {}: each rank {} of the 4 experts", l.ep, 4 / l.ep)));
    const float diff = max_difference(checkpoint(name), checkpoint("ep_ref"));
    INFO(name << ": largest parameter difference from one process " << diff);
    CHECK(diff <= kTolerance);
    CHECK(first_routing_line(r.output) == routing);  // the same tokens per expert, dropped, balancing loss
  }
}

TEST_CASE("an ep checkpoint holds every expert, loads on any ep alike, and a resumed run is byte-identical") {
  const std::string run = tiny_moe() + " --dp 2 --ep 2 --batch-size 2 --micro-batches 1 --lr-decay-iters 6 --max-iters 4";
  REQUIRE(train_3d(2, run + " --out-dir " + out("ep_straight")).status == 0);
  REQUIRE(train_3d(2, run + " --max-iters 2 --out-dir " + out("ep_split")).status == 0);
  REQUIRE(train_3d(2, run + " --resume --out-dir " + out("ep_split")).status == 0);
  CHECK(same_bytes(checkpoint("ep_straight") / "model.safetensors", checkpoint("ep_split") / "model.safetensors"));
  CHECK(same_bytes(checkpoint("ep_straight") / "optimizer.safetensors",
                   checkpoint("ep_split") / "optimizer.safetensors"));
  // One process with every expert, and 4 ranks each holding one: the same exact val loss (the
  // ep ranks' forwards kept in step over an uneven share of the windows) and the same sample.
  const std::string from = " --eval-interval 0 --sample-tokens 40 --init-from " + checkpoint("ep_straight").string();
  auto whole = train_dp(1, tiny(shakespeareish(), "data") + " --eval-only" + from);
  auto ep4 = train_3d(4, tiny(shakespeareish(), "data") + " --dp 4 --ep 4 --eval-only" + from);
  REQUIRE(whole.status == 0);
  REQUIRE(ep4.status == 0);
  CHECK(printed_val_loss_full(whole.output) == printed_val_loss_full(ep4.output));
  auto sample_whole = train_dp(1, tiny(shakespeareish(), "data") + " --sample-only" + from);
  auto sample_ep4 = train_3d(4, tiny(shakespeareish(), "data") + " --dp 4 --ep 4 --sample-only" + from);
  REQUIRE(sample_whole.status == 0);
  REQUIRE(sample_ep4.status == 0);
  CHECK(sample_whole.output.size() > 40);
  CHECK(sample_whole.output == sample_ep4.output);  // the text alone
}

TEST_CASE("an ep rank that skips a dispatch is named by the watchdog") {
  auto r = train_3d(2, tiny_moe() + " --dp 2 --ep 2 --batch-size 2 --micro-batches 1 --max-iters 4 --timeout 3 "
                               "--skip-dispatch-at-step 2 --crash-rank 1 --out-dir " + out("ep_skip"));
  CHECK(r.status == 3);
  // Rank 0 waits in the dispatch's count exchange (an alltoall on the ep group, the grid's
  // fifth split) for rank 1, which went on to the step's gradient average.
  CHECK_THAT(r.output, Catch::Contains("[watchdog] diagnosis: rank 1 called allreduce") ||
                           Catch::Contains("[watchdog] diagnosis: rank 0 waits"));
  CHECK_THAT(r.output, Catch::Contains("alltoall #") && Catch::Contains("'world/split4:0'"));
}

TEST_CASE("bad expert-parallel input: one line, exit status 2") {
  const std::string run = tiny_moe() + " --micro-batches 1 --out-dir " + out("ep_bad");
  usage_failure(train_3d(4, run + " --dp 4 --ep 3"), "--ep 3 does not divide --dp 4");
  usage_failure(train_3d(2, run + " --dp 2 --ep 2 --n-experts 3 --experts-per-token 1"),
                "--n-experts 3 is not divisible by --ep 2");
  usage_failure(train_3d(2, tiny(shakespeareish(), "data") + " --dp 2 --ep 2 --out-dir " + out("ep_bad")),
                "--ep 2 needs a mixture of experts (--n-experts)");
  usage_failure(train_3d(2, run + " --dp 2 --ep 0"), "--ep");
  usage_failure(train_3d(1, run + " --skip-dispatch-at-step 1 --crash-rank 0"),
                "--skip-dispatch-at-step needs a dispatch: --ep 2 or more");
}
