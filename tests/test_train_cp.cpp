// train_3d --cp end to end, under mpiexec: context parallelism (ring attention and Ulysses, cp 2
// and 4) alone (with dp, pp and tp: the layout matrix) ends where one process with the same global batch ends,
// dropout on; its checkpoint is the one model file train_dp evaluates alike; a resumed run is
// bit-identical; a cp rank that skips the ring is named with its group; bad input is one line.
#include <tuple>
#include <vector>

#include "trainer_test_util.hpp"

namespace {

CommandResult train_3d(int ranks, const std::string& args) { return run_trainer(TRAIN_3D, ranks, args); }
CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }

constexpr float kTolerance = 2e-5f;  // float sums in another order (as the other equivalence tests)

// 4 heads (Ulysses over cp 4), 4 blocks (2 stages), block size 16 (2·cp chunks for cp 2 and 4),
// dropout on and the default random sampling.
std::string common() {
  return tiny(shakespeareish(), "data", 4) + " --n-head 4 --dropout 0.1 --max-iters 4 --batch-size 4";
}

fs::path reference(int B) {
  const std::string name = fmt::format("cp_ref_b{}", B);
  if (!fs::exists(checkpoint(name) / "model.safetensors"))
    REQUIRE(train_dp(1, tiny(shakespeareish(), "data", 4) +
                            fmt::format(" --n-head 4 --dropout 0.1 --max-iters 4 --batch-size {} --out-dir {}", B,
                                        out(name)))
                .status == 0);
  return checkpoint(name);
}

}  // namespace

TEST_CASE("train_3d --cp: ring and Ulysses, cp 2 and 4, end where one process ends") {
  struct Layout {
    int dp, pp, cp, tp;
    const char* attention;
    bool sequence_parallel = false;  // each cp rank's positions cut again over tp
    const char* more = "";
  };
  // (cp 4 ring with --progress thread: the ring's hops run on the communication thread.)
  // (cp with dp, pp and tp, each with ZeRO: the layout matrix, tests/test_layout_matrix.cpp.)
  // (cp 2 traced: the layers' spans, checked below.)
  const fs::path ring_trace = work_dir() / "runs" / "cp_ring_trace.json";
  const fs::path ulysses_trace = work_dir() / "runs" / "cp_ulysses_trace.json";
  fs::create_directories(ring_trace.parent_path());
  const std::string ring_traced = " --trace-steps 2 --trace " + ring_trace.string();
  const std::string ulysses_traced = " --trace-steps 2 --trace " + ulysses_trace.string();
  for (Layout l : {Layout{1, 1, 2, 1, "ring", false, ring_traced.c_str()},
                   Layout{1, 1, 2, 1, "ulysses", false, ulysses_traced.c_str()},
                   Layout{1, 1, 4, 1, "ring", false, " --progress thread"}, Layout{1, 1, 4, 1, "ulysses"}}) {
    const std::string name =
        fmt::format("cp_d{}p{}c{}t{}{}_{}", l.dp, l.pp, l.cp, l.tp, l.sequence_parallel ? "sp" : "", l.attention);
    const int N = l.dp * l.pp * l.cp * l.tp;
    auto r = train_3d(N, common() + fmt::format(" --dp {} --pp {} --cp {} --tp {} --cp-attention {}{}{} "
                                                "--micro-batches 2 --out-dir {}",
                                                l.dp, l.pp, l.cp, l.tp, l.attention,
                                                l.sequence_parallel ? " --sequence-parallel" : "", l.more, out(name)));
    REQUIRE(r.status == 0);
    const float diff = max_difference(checkpoint(name), reference(4 * l.dp));
    INFO(name << ": largest parameter difference from one process with batch " << 4 * l.dp << " is " << diff);
    CHECK(diff <= kTolerance);
    CHECK_THAT(r.output, Catch::Contains(fmt::format("{} attention, {} of 16 positions per cp rank", l.attention,
                                                     16 / l.cp)));
    if (l.sequence_parallel)  // each tp rank's stream holds its piece of the cp rank's positions
      CHECK_THAT(r.output, Catch::Contains(fmt::format(", {} in each tp rank's stream", 16 / l.cp / l.tp)));
  }
  // The traces (scripts/plot_trace.py draws them; docs/context_parallel.md shows them): per rank,
  // layer (4), micro-batch (2) and step (2), inside the forward and the backward spans —
  const int per_pass = 4 * 2 * 2;
  const auto ring = trace_spans(ring_trace);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("ring, rank " << rank);
    // the ring's 2 blocks, own first; the one hop between them, whose wait is on the rank's row
    CHECK(spans_inside(ring, rank, "attention", fmt::format("K,V of rank {}", rank), "forward") == per_pass);
    CHECK(spans_inside(ring, rank, "attention", fmt::format("K,V of rank {}", 1 - rank), "forward") == per_pass);
    CHECK(spans_inside(ring, rank, "attention", "K,V of rank", "backward") == 2 * per_pass);
    CHECK(spans_inside(ring, rank, "wait", "waiting for the hop", "forward") == per_pass);
    CHECK(spans_inside(ring, rank, "exchange", "dK,dV hop", "backward") == 2 * per_pass);  // after each block
    // Each K,V hop on the communication row, posted before the block it hides behind: some
    // attention block runs inside it (--cp-overlap, on by default, posts it first; with it off
    // the hop would be posted after the block and hold none).
    int hops = 0, overlapped = 0;
    for (const auto& hop : ring)
      if (hop.tid == 10000 + rank && hop.cat == "exchange") {
        ++hops;
        for (const auto& block : ring)
          if (block.tid == rank && block.cat == "attention" && block.start >= hop.start && block.end <= hop.end) {
            ++overlapped;
            break;
          }
      }
    CHECK(hops == 2 * per_pass);  // forward and backward
    CHECK(overlapped == hops);
  }
  const auto ulysses = trace_spans(ulysses_trace);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("Ulysses, rank " << rank);
    // forward: positions → heads, the local heads over every position, heads → positions;
    // backward: the two trades the other way (their gradients)
    CHECK(spans_inside(ulysses, rank, "exchange", "all-to-all: positions → heads", "forward") == per_pass);
    CHECK(spans_inside(ulysses, rank, "attention", "attention: 2 of 4 heads, every position", "forward") == per_pass);
    CHECK(spans_inside(ulysses, rank, "exchange", "all-to-all: heads → positions", "forward") == per_pass);
    CHECK(spans_inside(ulysses, rank, "exchange", "all-to-all: ", "backward") == 2 * per_pass);
  }
  SECTION("the comparison has teeth: another seed ends far away") {
    REQUIRE(train_3d(2, common() + " --cp 2 --seed 7 --out-dir " + out("cp_seed7")).status == 0);
    CHECK(max_difference(checkpoint("cp_seed7"), reference(4)) > 100 * kTolerance);
  }
}

TEST_CASE("a cp checkpoint: train_dp evaluates it alike, and a resumed run is bit-identical") {
  const std::string run = common() + " --cp 2 --ckpt-interval 2 --lr-decay-iters 4";
  REQUIRE(train_3d(2, run + " --out-dir " + out("cp_straight")).status == 0);
  REQUIRE(train_3d(2, run + " --max-iters 2 --out-dir " + out("cp_resumed")).status == 0);
  REQUIRE(train_3d(2, run + " --resume --out-dir " + out("cp_resumed")).status == 0);
  CHECK(same_bytes(checkpoint("cp_straight") / "model.safetensors", checkpoint("cp_resumed") / "model.safetensors"));
  const std::string from = " --eval-only --init-from " + checkpoint("cp_straight").string();
  auto dp = train_dp(1, tiny(shakespeareish(), "data", 4) + " --n-head 4" + from);
  auto cp = train_3d(2, tiny(shakespeareish(), "data", 4) + " --n-head 4 --cp 2" + from);
  REQUIRE(dp.status == 0);
  REQUIRE(cp.status == 0);
  CHECK(printed_val_loss_full(dp.output) == printed_val_loss_full(cp.output));
}

TEST_CASE("a cp rank that skips the attention ring is named, with its group, by the watchdog") {
  auto r = train_3d(2, common() + " --cp 2 --max-iters 4 --timeout 3 --skip-ring-at-step 2 --crash-rank 1 "
                                  "--out-dir " + out("cp_skip"));
  CHECK(r.status == 3);
  // Rank 0 waits in the ring for rank 1, which went on to the step's gradient average; the
  // group is the grid's second split of the world (tp, cp, pp, dp): the cp group. Whichever
  // rank's deadline passes first reports, so the diagnosis comes in one of two forms.
  CHECK_THAT(r.output, Catch::Contains("[watchdog] diagnosis: rank 0 waits to receive from rank 1") ||
                           Catch::Contains("[watchdog] diagnosis: rank 1 called allreduce"));
  CHECK_THAT(r.output, Catch::Contains("sendrecv #") && Catch::Contains("on 'world/split1:0' (count"));
  CHECK_THAT(r.output, Catch::Contains("rank 1 is waiting in a different call, allreduce") ||
                           Catch::Contains("rank 0 is waiting in a different call, sendrecv"));
}

TEST_CASE("bad context-parallel input: one line, exit status 2") {
  const std::string run = common() + " --out-dir " + out("cp_bad");
  usage_failure(train_3d(3, run + " --cp 3"), "--cp 3: --block-size 16 does not split into 2·cp = 6 equal chunks");
  usage_failure(train_3d(3, run + " --cp 3 --block-size 24 --cp-attention ulysses"),
                "--cp-attention ulysses: the 4 heads of each tp rank do not split over --cp 3");
  usage_failure(train_3d(6, run + " --cp 2 --tp 3 --sequence-parallel --n-head 3 --n-embd 48 --block-size 24"),
                "--cp with --sequence-parallel needs an even --tp (got 3)");
  usage_failure(train_3d(2, run + " --cp 4"), "2 ranks cannot be --dp 1 × --pp 1 × --cp 4 × --tp 1 = 4");
  usage_failure(train_3d(1, run + " --cp 65536 --tp 65536"), "--cp 65536 × --tp 65536 = 4294967296");  // no int overflow
  usage_failure(train_3d(2, run + " --cp 2 --cp-attention sideways"), "--cp-attention");
  usage_failure(train_3d(2, run + " --cp 2 --attention naive"), "--cp-attention ring has its own kernel");
  usage_failure(train_3d(1, run + " --skip-ring-at-step 1 --crash-rank 0"), "--skip-ring-at-step needs a ring");
}
