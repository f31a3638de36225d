// A mixture-of-experts GPT (nn/moe_mlp.hpp) through the trainers, under mpiexec: every layout
// that composes with it — data parallelism, accumulation, ZeRO, a pipeline, full recompute —
// ends where one process ends, having dropped the same choices; resume is exact; bad input is
// one line and exit status 2. Then expert parallelism, train_3d --ep (parallel/ep/): ep smaller
// than dp ends where one process with every expert ends (ep 2, 4, ep × pp: the layout matrix); its
// checkpoint is the one nanoGPT-named file, which loads on any ep; a resumed run is
// byte-identical; a rank that skips a dispatch is named by the watchdog.
#include <fstream>
#include <iterator>

#include "trainer_test_util.hpp"

namespace {

CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }
CommandResult train_pp(int ranks, const std::string& args) { return run_trainer(TRAIN_PP, ranks, args); }
CommandResult train_tp(int ranks, const std::string& args) { return run_trainer(TRAIN_TP, ranks, args); }
CommandResult train_3d(int ranks, const std::string& args) { return run_trainer(TRAIN_3D, ranks, args); }

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
  // Beside tp the experts are folded into the ep group (parallel/ep/tensor_parallel_folding.hpp);
  // what still cannot run says why.
  usage_failure(train_tp(2, run + " --n-experts 2 --sequence-parallel"),
                "--n-experts 2 with --sequence-parallel: a mixture of experts routes whole sequences");
  usage_failure(train_tp(2, run + " --n-experts 3 --experts-per-token 1"),
                "--n-experts 3 is not divisible by --ep 1 × --tp 2 = 2: the tp ranks are folded into the experts' group");

}

// ---- expert parallelism: train_3d --ep ----------------------------------------------------------

TEST_CASE("expert parallelism ends where one process ends: ep < dp, bucketed as naive") {
  auto reference = train_dp(1, tiny_moe() + " --batch-size 4 --out-dir " + out("ep_ref"));
  REQUIRE(reference.status == 0);
  const std::string routing = first_routing_line(reference.output);
  struct Layout {
    int dp, ep, pp;
  };
  // (ep 2, ep 4 and ep × pp, each with ZeRO: the layout matrix, tests/test_layout_matrix.cpp.)
  for (Layout l : {Layout{4, 2, 1}}) {
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
    if (l.dp == 4 && l.ep == 2) {
      // The experts' gradients average over their own group, bucket by bucket during backward
      // (parallel/dp/replicas_by_role.hpp): the same as one blocking call per group after it.
      CHECK_THAT(r.output, Catch::Contains("dp averaging: ") && Catch::Contains("over 2 rank(s), then × 1/2: bucketed"));
      // (traced: the dispatch and combine around the experts, checked below)
      const fs::path trace = work_dir() / "runs" / "ep_trace.json";
      fs::create_directories(trace.parent_path());
      auto naive = train_3d(4, tiny_moe() + " --dp 4 --ep 2 --batch-size 1 --micro-batches 1 --ddp naive --out-dir " +
                                   out("ep_naive") + " --trace-steps 2 --trace " + trace.string());
      REQUIRE(naive.status == 0);
      CHECK(max_difference(checkpoint(name), checkpoint("ep_naive")) <= 1e-6f);
      // Per rank, mixture block (2) and step (2): counts, dispatch, the held experts, combine in
      // forward; the combine's and the dispatch's gradients in backward, in that order.
      const auto spans = trace_spans(trace);
      for (int rank = 0; rank < 4; ++rank) {
        INFO("ep trace, rank " << rank);
        CHECK(spans_inside(spans, rank, "exchange", "dispatch's counts", "forward") == 4);
        CHECK(spans_inside(spans, rank, "exchange", "dispatch", "forward") == 2 * 4);  // (the counts' too)
        CHECK(spans_inside(spans, rank, "experts", fmt::format("experts {}-{}: ", rank % 2 * 2, rank % 2 * 2 + 1),
                           "forward") == 4);
        CHECK(spans_inside(spans, rank, "exchange", "combine", "forward") == 4);
        CHECK(spans_inside(spans, rank, "exchange", "combine's gradient", "backward") == 4);
        CHECK(spans_inside(spans, rank, "exchange", "dispatch's gradient", "backward") == 4);
        double last_combine_gradient = 0, last_dispatch_gradient = 0;
        for (const auto& s : spans)
          if (s.tid == rank && s.name == "combine's gradient") last_combine_gradient = s.start;
          else if (s.tid == rank && s.name == "dispatch's gradient") last_dispatch_gradient = s.start;
        CHECK(last_combine_gradient < last_dispatch_gradient);  // the tape runs backward
      }
    }
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
  // And with the tp ranks folded in (each of 4 ranks one expert, the matmuls cut over tp 2: the
  // same loss but for float sums in another order).
  auto ep2_tp2 = train_3d(4, tiny(shakespeareish(), "data") + " --dp 2 --ep 2 --tp 2 --eval-only" + from);
  REQUIRE(ep2_tp2.status == 0);
  CHECK(std::stod(printed_val_loss_full(ep2_tp2.output)) ==
        Approx(std::stod(printed_val_loss_full(whole.output))).margin(2e-4));
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
