// --virtual-stages V (interleaved 1F1B, parallel/pp/schedule_interleaved.cpp) end to end, under
// mpiexec: GPipe ≡ 1F1B ≡ interleaved bit for bit for the same batch (P = 2, 3, 4; uneven
// chunks; with data parallelism; dropout on throughout), and near one process; train_3d
// alike; the log's bubble formula and chunks in flight; the trace's spans; a checkpoint that
// train_dp evaluates alike and that resumes exactly with V kept; bad layouts refused in one line.
#include "trainer_test_util.hpp"

namespace {

CommandResult train_pp(int ranks, const std::string& args) { return run_trainer(TRAIN_PP, ranks, args); }
CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }

constexpr int kSteps = 4;
constexpr float kTolerance = 2e-5f;  // as the data-parallel test: float sums in another order

// Dropout on throughout: masks are the same whichever stage and chunk runs a layer.
std::string common(int layers) {
  return tiny(shakespeareish(), "data", layers) + fmt::format(" --n-head 4 --dropout 0.1 --max-iters {}", kSteps);
}

// Runs `program` with `args` under V = 1 (1F1B), V (interleaved 1F1B) and V (GPipe order);
// all three must end with the same model and optimizer bytes. Returns the interleaved output.
std::string same_as_one_chunk(const char* program, int ranks, const std::string& name, const std::string& args, int V) {
  std::string interleaved_output;
  for (const auto& [suffix, flags] : std::vector<std::pair<std::string, std::string>>{
           {"v1", "--virtual-stages 1 --schedule 1f1b"},
           {"interleaved", fmt::format("--virtual-stages {} --schedule 1f1b", V)},
           {"gpipe", fmt::format("--virtual-stages {} --schedule gpipe", V)}}) {
    const std::string run = name + "_" + suffix;
    CommandResult r = run_trainer(program, ranks, fmt::format("{} {} --out-dir {}", args, flags, out(run)));
    REQUIRE(r.status == 0);
    if (suffix == "interleaved") interleaved_output = r.output;
    if (suffix == "v1") continue;
    INFO(run << " against " << name << "_v1");
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      CHECK(same_bytes(checkpoint(run) / file, checkpoint(name + "_v1") / file));
  }
  return interleaved_output;
}

}  // namespace

TEST_CASE("virtual stages: interleaved 1F1B ≡ GPipe ≡ 1F1B bit for bit, on 2, 3 and 4 stages, uneven chunks too") {
  // (P, V, n_layer, M): P·V chunks of the layers; M a multiple of P.
  for (auto [P, V, L, M] : std::vector<std::array<int, 4>>{{2, 2, 4, 2}, {2, 2, 4, 4}, {2, 3, 6, 2}, {3, 2, 6, 3},
                                                           {4, 2, 8, 4}}) {
    const std::string name = fmt::format("p{}_v{}_m{}", P, V, M);
    const std::string out_text =
        same_as_one_chunk(TRAIN_PP, P, name, common(L) + fmt::format(" --batch-size {} --micro-batches {}", 2 * M, M), V);
    CHECK_THAT(out_text, Catch::Contains(fmt::format("interleaved, {} chunks per stage ({} virtual stages", V, P * V)));
  }
  // n_layer 6 as 4 chunks of 2,1,2,1: stage 0 holds blocks 0-1 and 3-4, stage 1 blocks 2 and 5.
  REQUIRE(train_pp(2, common(6) + " --batch-size 4 --micro-batches 2 --stage-layers 2,1,2,1 --virtual-stages 2 "
                                  "--out-dir " + out("uneven")).status == 0);
  // The same batch in one chunk per stage (the V = 3 case above, run first).
  CHECK(same_bytes(checkpoint("uneven") / "model.safetensors", checkpoint("p2_v3_m2_v1") / "model.safetensors"));
  SECTION("and near one process with the same batch") {
    REQUIRE(train_dp(1, common(4) + " --batch-size 8 --out-dir " + out("one_process")).status == 0);
    CHECK(max_difference(checkpoint("p2_v2_m4_interleaved"), checkpoint("one_process")) <= kTolerance);
  }
}

TEST_CASE("virtual stages: with data parallelism (overlapped averaging) and with dropout, the same bytes") {
  // 2 replicas of 2 stages: each chunk's last backward communicates; buckets span chunks.
  same_as_one_chunk(TRAIN_PP, 4, "dp2", common(4) + " --dp 2 --batch-size 4 --micro-batches 2 --bucket-mb 0.01", 2);
}

TEST_CASE("virtual stages: the log's bubble formula and chunks in flight, the trace's spans") {
  const fs::path file = work_dir() / "runs" / "interleaved_trace.json";
  fs::create_directories(file.parent_path());
  auto r = train_pp(2, common(4) + " --batch-size 8 --micro-batches 4 --virtual-stages 2 --trace " + file.string() +
                           " --trace-steps 2 --out-dir " + out("interleaved_log"));
  REQUIRE(r.status == 0);
  // (P − 1)/(V·M + P − 1) = 1/9; stage r holds at most min(2(P − r − 1) + (V − 1)·P + 1, V·M).
  CHECK_THAT(r.output, Catch::Contains("11% by the formula (p−1)/(v·M+p−1)"));
  CHECK_THAT(r.output, Catch::Contains("chunk micro-batches in flight ≤ 5 3"));
  const auto trace = nlohmann::json::parse(nn::read_whole_file(file));
  std::map<std::pair<int, std::string>, int> count;  // (rank, category) → spans
  bool named = false;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") {
      ++count[{e.at("tid").get<int>(), e.at("cat").get<std::string>()}];
      named = named || e.value("name", "") == "F3c1";
    }
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    CHECK(count[{rank, "forward"}] == 2 * 4 * 2);  // V chunks × M micro-batches × 2 steps
    CHECK(count[{rank, "backward"}] == 2 * 4 * 2);
  }
  CHECK(named);
}

TEST_CASE("virtual stages: the checkpoint loads in train_dp alike, and --resume keeps V and continues exactly") {
  const std::string run = common(4) + " --batch-size 4 --micro-batches 2 --lr-decay-iters 8 "
                                      "--ckpt-interval 2 --virtual-stages 2";
  REQUIRE(train_pp(2, run + " --max-iters 6 --out-dir " + out("straight")).status == 0);
  REQUIRE(train_pp(2, run + " --max-iters 3 --out-dir " + out("resumed")).status == 0);
  // Typed without --virtual-stages: the checkpoint gives it back.
  auto resumed = train_pp(2, common(4) + " --max-iters 6 --resume --out-dir " + out("resumed"));
  REQUIRE(resumed.status == 0);
  CHECK_THAT(resumed.output, Catch::Contains("interleaved, 2 chunks per stage"));
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    CHECK(same_bytes(checkpoint("straight") / f, checkpoint("resumed") / f));
  // The layout is not in the weights: train_dp and an interleaved pipeline evaluate it alike.
  const std::string eval = common(4) + " --eval-only --init-from " + checkpoint("straight").string();
  auto dp = train_dp(1, eval);
  auto pp = train_pp(2, eval + " --virtual-stages 2");
  REQUIRE(dp.status == 0);
  REQUIRE(pp.status == 0);
  CHECK(printed_val_loss_full(dp.output) == printed_val_loss_full(pp.output));
}

TEST_CASE("virtual stages: train_3d (pp 2 × tp 2, sequence parallel) ≡ one chunk per stage, bit for bit") {
  same_as_one_chunk(TRAIN_3D, 4, "3d",
                    common(4) + " --dp 1 --pp 2 --tp 2 --sequence-parallel --batch-size 4 --micro-batches 2", 2);
}

TEST_CASE("virtual stages: layouts the schedule cannot run are refused in one line, exit status 2") {
  const std::string run = common(4) + " --batch-size 6 --out-dir " + out("bad");
  usage_failure(train_pp(2, run + " --micro-batches 3 --virtual-stages 2"),
                "--virtual-stages 2: --micro-batches 3 is not a multiple of the 2 pipeline stages (interleaved 1F1B "
                "runs micro-batches in groups of p)");
  usage_failure(train_pp(1, run + " --micro-batches 2 --virtual-stages 2"), "--virtual-stages 2 needs 2 or more pipeline stages");
  usage_failure(train_pp(2, run + " --micro-batches 2 --virtual-stages 3"),
                "--virtual-stages 3 × 2 stages = 6 chunks for 4 blocks: every chunk needs at least one block");
  usage_failure(train_pp(2, run + " --micro-batches 2 --virtual-stages 0"), "--virtual-stages must be a whole number");
  usage_failure(train_pp(2, run + " --micro-batches 2 --virtual-stages 2 --stage-layers 2,2"),
                "--stage-layers lists 2 numbers, but 2 stages × --virtual-stages 2 make 4 chunks");
  // Evaluation builds the same layout: refused too, not a hang on a one-stage ring.
  REQUIRE(train_pp(2, common(4) + " --batch-size 4 --micro-batches 2 --max-iters 1 --out-dir " + out("one")).status == 0);
  usage_failure(train_pp(1, common(4) + " --eval-only --virtual-stages 2 --init-from " + checkpoint("one").string()),
                "--virtual-stages 2 needs 2 or more pipeline stages");
}
