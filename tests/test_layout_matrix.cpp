// The layout matrix: one program that runs a list of train_3d layouts of a tiny model for a few
// steps — dropout 0.1, the default random sampling, the same global batch — and holds each to
// one process (train_dp on 1 rank): every pair of the dimensions that compose, ZeRO 1 and 2 with
// each dimension, the mixture of experts with each dimension it runs beside. A layout's run
// also shows its own line (cp's positions, ep's experts) and, under ZeRO, each rank's memory
// beside the paper's formula by role (parallel/dp/zero_by_role.hpp).
//
// The largest layout has all five: dp × ep × pp × cp × tp with ZeRO-1 on 16 ranks (the tp ranks
// folded into the experts' group, each cp rank's chunks routed from the earlier chunks' choices).
#include <regex>
#include <vector>

#include "trainer_test_util.hpp"

namespace {

CommandResult train_3d(int ranks, const std::string& args) { return run_trainer(TRAIN_3D, ranks, args); }
CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }

constexpr float kTolerance = 2e-5f;  // float sums in another order (as the other equivalence tests)

// 4 heads (Ulysses over cp 2 × tp 2), 4 blocks (2 stages of 2 chunks), block size 16 (2·cp chunks).
std::string dense() {
  return tiny(shakespeareish(), "data", 4) + " --n-head 4 --dropout 0.1 --max-iters 4";
}
double bytes_of(const std::string& number, const std::string& unit) {
  const double units[] = {1, 1024, 1024.0 * 1024, 1024.0 * 1024 * 1024};
  const char* names[] = {"B", "KiB", "MiB", "GiB"};
  for (int i = 0; i < 4; ++i)
    if (unit == names[i]) return std::stod(number) * units[i];
  FAIL("unknown unit " << unit);
  return 0;
}

// Every rank's memory line under ZeRO: what the allocator holds against the formula, within 5 %
// (the log's 3 significant digits and each group's padding to the ranks).
void check_memory_against_formula(const std::string& output, int ranks, int stage) {
  const std::regex line(fmt::format(R"(memory rank (\d+) \(allocator\): .* = ([0-9.]+) (B|KiB|MiB) \(ZeRO-{} formula ([0-9.]+) (B|KiB|MiB)\))", stage));
  int seen = 0;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it) {
    const double held = bytes_of((*it)[2], (*it)[3]), formula = bytes_of((*it)[4], (*it)[5]);
    INFO((*it)[0]);
    CHECK(std::abs(held - formula) <= 0.05 * formula);
    ++seen;
  }
  CHECK(seen == ranks);
}

struct Layout {
  const char* name;
  int ranks;
  std::string flags;  // beside the model's: the degrees and this layout's batch
  std::string shows;  // a line of its own in the output ("" for none)
};

int zero_of(const Layout& l) {
  std::smatch m;
  return std::regex_search(l.flags, m, std::regex(R"(--zero (\d))")) ? std::stoi(m[1]) : 0;
}

// Runs each layout and compares its checkpoint with the reference's; returns the outputs.
std::vector<std::string> run_against(const std::string& model, const std::string& reference,
                                     const std::vector<Layout>& layouts) {
  std::vector<std::string> outputs;
  for (const Layout& l : layouts) {
    auto r = train_3d(l.ranks, model + " " + l.flags + " --out-dir " + out(l.name));
    REQUIRE(r.status == 0);
    const float diff = max_difference(checkpoint(l.name), checkpoint(reference));
    INFO(l.name << ": largest parameter difference from one process " << diff);
    CHECK(diff <= kTolerance);
    if (!l.shows.empty()) CHECK_THAT(r.output, Catch::Contains(l.shows));
    if (const int stage = zero_of(l); stage > 0) {
      CHECK_THAT(r.output, Catch::Contains(fmt::format("dp averaging and update: ZeRO stage {} by role", stage)));
      check_memory_against_formula(r.output, l.ranks, stage);
    }
    outputs.push_back(r.output);
  }
  return outputs;
}

}  // namespace

TEST_CASE("layout matrix, dense: every pair of dp, pp, cp and tp, ZeRO 1 and 2 with each, end where one process ends") {
  REQUIRE(train_dp(1, dense() + " --batch-size 4 --out-dir " + out("dense_ref")).status == 0);
  const std::vector<Layout> layouts = {
      {"dp2_zero2", 2, "--dp 2 --zero 2 --batch-size 2", ""},
      {"dp2_pp2_zero1", 4, "--dp 2 --pp 2 --zero 1 --batch-size 2", ""},
      // ZeRO's reduce-scatters from inside interleaved chunks' backwards (each chunk's last micro-batch)
      {"dp2_pp2_v2_zero2", 4, "--dp 2 --pp 2 --virtual-stages 2 --zero 2 --batch-size 2", ""},
      {"dp2_tp2_sp_zero2", 4, "--dp 2 --tp 2 --sequence-parallel --zero 2 --batch-size 2", ""},
      {"dp2_cp2_ring_zero1", 4, "--dp 2 --cp 2 --cp-attention ring --zero 1 --batch-size 2",
       "ring attention, 8 of 16 positions per cp rank"},
      {"pp2_cp2_ulysses_zero2", 4, "--pp 2 --cp 2 --cp-attention ulysses --zero 2 --batch-size 4 --micro-batches 2",
       "ulysses attention, 8 of 16 positions per cp rank"},
      {"pp2_tp2_zero1", 4, "--pp 2 --tp 2 --zero 1 --batch-size 4", ""},
      {"cp2_tp2_ring", 4, "--cp 2 --tp 2 --cp-attention ring --batch-size 4",
       "ring attention, 8 of 16 positions per cp rank"},
      // each cp rank's positions cut again over tp
      {"cp2_tp2_ulysses_sp_zero1", 4, "--cp 2 --tp 2 --cp-attention ulysses --sequence-parallel --zero 1 --batch-size 4",
       ", 4 in each tp rank's stream"},
      // the recipe of Llama 3 405B at toy size (docs/3d_parallelism.md, "The recipes"): tp × cp × pp
      // × sharded dp, 16 ranks
      {"recipe_llama3", 16,
       "--dp 2 --pp 2 --cp 2 --tp 2 --cp-attention ring --sequence-parallel --zero 2 --batch-size 2 --micro-batches 2",
       "rank 5 = dp 0 · pp 1 · cp 0 · tp 1"},
  };
  run_against(dense(), "dense_ref", layouts);
}

TEST_CASE("layout matrix, mixture of experts: with dp, pp, cp, tp and ep, ZeRO 1 and 2 with each, all five, end where one process ends") {
  auto reference = train_dp(1, tiny_moe() + " --batch-size 4 --out-dir " + out("moe_ref"));
  REQUIRE(reference.status == 0);
  const std::string routing = first_routing_line(reference.output);
  const std::vector<Layout> layouts = {
      {"moe_dp2_zero1", 2, "--dp 2 --zero 1 --batch-size 2", ""},
      {"moe_pp2_zero2", 2, "--pp 2 --zero 2 --batch-size 4 --micro-batches 2", ""},
      {"moe_dp2_ep2_zero2", 2, "--dp 2 --ep 2 --zero 2 --batch-size 2 --micro-batches 1",
       "(ep 2: each rank 2 of the 4 experts"},
      // the recipes of DeepSeek-V3 (pp × ep × ZeRO-1 dp, no tp) and of Mixtral on Megatron core
      // (ep × pp with the distributed optimizer, tp added at 8×22B) at toy size
      {"recipe_deepseek_v3", 8, "--dp 4 --ep 4 --pp 2 --zero 1 --batch-size 1 --micro-batches 1",
       "(ep 4: each rank 1 of the 4 experts"},
      {"recipe_mixtral", 8, "--dp 2 --ep 2 --pp 2 --tp 2 --zero 1 --batch-size 2 --micro-batches 2",
       "(ep 2 × tp 2 folded: each rank 1 of the 4 experts"},
      // the experts' shards over their expert-dp pair, the rest over all four
      {"moe_dp4_ep2_zero2", 4, "--dp 4 --ep 2 --zero 2 --batch-size 1 --micro-batches 1",
       " (experts, then × 1/2)"},
      // the tp ranks folded into the experts' group: 2 ranks share the 4 experts …
      {"moe_dp2_tp2_zero2", 4, "--dp 2 --tp 2 --zero 2 --batch-size 2",
       "(ep 1 × tp 2 folded: each rank 2 of the 4 experts"},
      // capacity over whole sequences split over cp: each cp rank's chunks start from the earlier ones' choices
      {"moe_dp2_ep2_cp2_zero2", 4, "--dp 2 --ep 2 --cp 2 --zero 2 --batch-size 2 --micro-batches 1",
       "ring attention, 8 of 16 positions per cp rank"},
      // all five, with ZeRO-1: each of 16 ranks one of the 4 experts
      {"moe_all_five_zero1", 16,
       "--dp 2 --ep 2 --pp 2 --cp 2 --tp 2 --zero 1 --batch-size 2 --micro-batches 2",
       "(ep 2 × tp 2 folded: each rank 1 of the 4 experts"},
  };
  for (const std::string& output : run_against(tiny_moe(), "moe_ref", layouts))
    CHECK(first_routing_line(output) == routing);  // the same tokens per expert, dropped, balancing loss
}

TEST_CASE("layout matrix: a ZeRO checkpoint is the one whole file, resumed byte-exact, and under another layout") {
  // The experts folded over tp, across a pipeline, each rank's moments sharded (ZeRO-2): 8 ranks.
  const std::string run = tiny_moe() + " --dp 2 --ep 2 --pp 2 --tp 2 --zero 2 --batch-size 2 --micro-batches 2 "
                                       "--ckpt-interval 2 --lr-decay-iters 4";
  REQUIRE(train_3d(8, run + " --max-iters 4 --out-dir " + out("zero_straight")).status == 0);
  REQUIRE(train_3d(8, run + " --max-iters 2 --out-dir " + out("zero_split")).status == 0);
  REQUIRE(train_3d(8, run + " --max-iters 4 --resume --out-dir " + out("zero_split")).status == 0);
  CHECK(same_bytes(checkpoint("zero_straight") / "model.safetensors", checkpoint("zero_split") / "model.safetensors"));
  CHECK(same_bytes(checkpoint("zero_straight") / "optimizer.safetensors",
                   checkpoint("zero_split") / "optimizer.safetensors"));
  // The same two steps from a replicated run's checkpoint (dp 2 × ep 2 × cp 2: the experts of
  // cp rank 0's ep group in the file, no ZeRO) end alike.
  const std::string other = tiny_moe() + " --ckpt-interval 2 --lr-decay-iters 4 --max-iters 2";
  REQUIRE(train_3d(4, other + " --dp 2 --ep 2 --cp 2 --batch-size 2 --micro-batches 1 --out-dir " + out("zero_from_dp"))
              .status == 0);
  // (a resume keeps the checkpoint's layout but for the flags typed again: --cp 1)
  REQUIRE(train_3d(8, run + " --cp 1 --max-iters 4 --resume --out-dir " + out("zero_from_dp")).status == 0);
  CHECK(max_difference(checkpoint("zero_straight"), checkpoint("zero_from_dp")) <= kTolerance);
}

TEST_CASE("layout matrix: ZeRO-3 beside another dimension is refused in one line, exit status 2, and what a restart keeps") {
  const std::string run = dense() + " --batch-size 4 --out-dir " + out("zero_bad");
  usage_failure(train_3d(2, run + " --pp 2 --zero 3"), "--zero 3 runs with pure data parallelism (train_dp)");
  usage_failure(train_3d(2, run + " --dp 2 --zero 3"), "--zero 3 runs with pure data parallelism (train_dp)");
  usage_failure(train_3d(2, run + " --dp 2 --zero 4"), "--zero");
  // What nanodist-run asks before a launch or a restart says the same (no MPI: the query alone).
  const CommandResult query = run_command(std::string(TRAIN_3D) + " --dp 2 --zero 3 --layout-query 2:2");
  CHECK_THAT(query.output, Catch::Contains("--zero 3 runs with pure data parallelism (train_dp)"));
  // … and what the trainer refuses of a mixture; a restart on fewer ranks keeps the largest ep
  // that still divides dp (all five on 16 ranks → 8: dp 1, so ep 1; the checkpoint holds every expert).
  const std::string mixture = std::string(TRAIN_3D) + " --n-experts 4 --batch-size 2";
  CHECK_THAT(run_command(mixture + " --tp 2 --sequence-parallel --layout-query 2:2").output,
             Catch::Contains("--n-experts 4 with --sequence-parallel: a mixture of experts routes whole sequences"));
  const CommandResult shrunk =
      run_command(mixture + " --dp 2 --ep 2 --pp 2 --cp 2 --tp 2 --zero 1 --layout-query 16:8");
  CHECK_THAT(shrunk.output, Catch::Contains(R"("--dp":"1")") && Catch::Contains(R"("--ep":"1")") &&
                                Catch::Contains(R"("ok":true)"));
}
