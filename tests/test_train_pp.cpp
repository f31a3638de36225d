// train_pp end to end, under mpiexec: a pipeline (× data parallelism) ends where one process
// with the same global batch ends; GPipe and 1F1B agree bit for bit; the tied embedding stays
// identical; checkpoints load in train_dp and resume exactly; a stage that dies or skips a
// send is named by the watchdog; bad input is one line and exit status 2.
#include <set>

#include "trainer_test_util.hpp"

namespace {

CommandResult train_pp(int ranks, const std::string& args) { return run_trainer(TRAIN_PP, ranks, args); }
CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }

constexpr int kSteps = 5;
constexpr float kTolerance = 2e-5f;  // as the data-parallel test: float sums in another order

// 4 blocks (enough for 4 stages), dropout on and the default random sampling: the global
// batch and every dropout mask are the same in any layout.
std::string common() {
  return tiny(shakespeareish(), "data", 4) + fmt::format(" --dropout 0.1 --max-iters {}", kSteps);
}

// One process with batch B: the reference every pipeline with that global batch must match.
fs::path reference(int B) {
  const std::string name = fmt::format("pp_ref_b{}", B);
  if (!fs::exists(checkpoint(name) / "model.safetensors"))
    REQUIRE(train_dp(1, common() + fmt::format(" --batch-size {} --out-dir {}", B, out(name))).status == 0);
  return checkpoint(name);
}

}  // namespace

TEST_CASE("P stages × M micro-batches end where one process with the same batch ends, GPipe ≡ 1F1B bit for bit") {
  for (int P : {2, 3, 4})
    for (int M : {1, P, 2 * P + 1}) {
      const int B = 2 * M;  // micro-batches of 2
      std::string runs[2];
      for (int s = 0; s < 2; ++s) {
        const std::string schedule = s == 0 ? "gpipe" : "1f1b";
        runs[s] = fmt::format("pp{}_m{}_{}", P, M, schedule);
        auto r = train_pp(P, common() + fmt::format(" --batch-size {} --micro-batches {} --schedule {} --out-dir {}", B,
                                                    M, schedule, out(runs[s])));
        REQUIRE(r.status == 0);
        const float diff = max_difference(checkpoint(runs[s]), reference(B));
        INFO(runs[s] << ": largest parameter difference from one process with batch " << B << " is " << diff);
        CHECK(diff <= kTolerance);
      }
      CHECK(same_bytes(checkpoint(runs[0]) / "model.safetensors", checkpoint(runs[1]) / "model.safetensors"));
    }
}

TEST_CASE("pipeline × data parallelism, and an uneven split, match one process too") {
  // 2 pipelines of 2 stages, 4 per replica → one process with batch 8.
  auto r = train_pp(4, common() + " --dp 2 --batch-size 4 --micro-batches 2 --out-dir " + out("pp2_dp2"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("rank 3 = dp 1 · pp 1"));
  CHECK(max_difference(checkpoint("pp2_dp2"), reference(8)) <= kTolerance);
  SECTION("the comparison has teeth: other data (partition sampling) ends far away") {
    auto other = train_pp(
        4, common() + " --dp 2 --batch-size 4 --micro-batches 2 --sampling partition --out-dir " + out("pp2_dp2_partition"));
    REQUIRE(other.status == 0);
    CHECK(max_difference(checkpoint("pp2_dp2_partition"), reference(8)) > 100 * kTolerance);
  }
  auto uneven =
      train_pp(3, common() + " --stage-layers 2,1,1 --batch-size 6 --micro-batches 3 --out-dir " + out("pp3_uneven"));
  REQUIRE(uneven.status == 0);
  CHECK_THAT(uneven.output, Catch::Contains("stages: 2/1/1 blocks"));
  CHECK(max_difference(checkpoint("pp3_uneven"), reference(6)) <= kTolerance);
}

TEST_CASE("the tied embedding stays identical, a pipeline checkpoint loads in train_dp, resume is exact") {
  const std::string run = common() + " --batch-size 4 --micro-batches 2 --lr-decay-iters 8 --ckpt-interval 2";
  // Check mode verifies the two copies of wte bit for bit at the start and the end.
  auto straight = train_pp(3, run + " --max-iters 8 --check-collectives --out-dir " + out("pp_straight"));
  REQUIRE(straight.status == 0);
  CHECK_THAT(straight.output, !Catch::Contains("differ"));
  // The same val_loss_full from train_dp (one whole model) and train_pp (3 stages).
  auto dp = train_dp(2, common() + " --eval-only --init-from " + checkpoint("pp_straight").string());
  auto pp = train_pp(2, common() + " --eval-only --init-from " + checkpoint("pp_straight").string());
  REQUIRE(dp.status == 0);
  REQUIRE(pp.status == 0);
  CHECK(printed_val_loss_full(dp.output) == printed_val_loss_full(pp.output));
  // Samples through the pipeline: the last stage draws each token and sends it to all.
  auto sample = train_pp(
      3, "--sample-only --sample-tokens 30 --prompt 'the king' --init-from " + checkpoint("pp_straight").string());
  REQUIRE(sample.status == 0);
  CHECK_THAT(sample.output, Catch::StartsWith("the king"));
  CHECK(sample.output.size() >= 38);
  // 4 steps, then 4 more resumed: bit-identical to 8 in one run (dropout on).
  REQUIRE(train_pp(3, run + " --max-iters 4 --out-dir " + out("pp_resumed")).status == 0);
  auto resumed = train_pp(3, run + " --max-iters 8 --resume --out-dir " + out("pp_resumed"));
  REQUIRE(resumed.status == 0);
  CHECK(same_bytes(checkpoint("pp_straight") / "model.safetensors", checkpoint("pp_resumed") / "model.safetensors"));
  CHECK(same_bytes(checkpoint("pp_straight") / "optimizer.safetensors",
                   checkpoint("pp_resumed") / "optimizer.safetensors"));
  // And under another number of stages and schedule it resumes too (the same masks; sums in another order).
  REQUIRE(train_pp(2, run + " --max-iters 4 --out-dir " + out("pp_other")).status == 0);
  auto other = train_pp(4, run + " --max-iters 6 --resume --schedule gpipe --out-dir " + out("pp_other"));
  CHECK(other.status == 0);
  CHECK(nn::read_checkpoint_info(checkpoint("pp_other")).train_state.at("step") == 6);
}

TEST_CASE("a resume under another layout compares replicas and global batches, not rank counts") {
  const std::string run = common() + " --batch-size 4 --ckpt-interval 1 --out-dir " + out("dp_then_pp");
  fs::remove_all(out("dp_then_pp"));
  REQUIRE(train_dp(2, run + " --max-iters 2").status == 0);  // 2 replicas × 4 = 8 sequences per step
  // 3 pipeline stages, one replica of --batch-size 4 (the checkpoint's): half the global batch.
  auto pp = train_pp(3, run + " --max-iters 3 --micro-batches 2 --resume");
  REQUIRE(pp.status == 0);
  CHECK_THAT(pp.output, Catch::Contains("note: the checkpoint's steps took 8 sequences (2 data-parallel replicas), "
                                        "this job's take 4 (1 data-parallel replica)"));
  CHECK_THAT(pp.output, !Catch::Contains("micro-batches instead"));
  // Two replicas of 2 stages: 8 again, from a checkpoint of 1 replica × 4.
  auto pp_dp = train_pp(4, run + " --max-iters 4 --dp 2 --micro-batches 2 --resume");
  REQUIRE(pp_dp.status == 0);
  CHECK_THAT(pp_dp.output, Catch::Contains("took 4 sequences (1 data-parallel replica), this job's take 8 (2 "
                                           "data-parallel replicas)"));
  // One rank with twice the batch: the same global batch, fewer replicas.
  auto one = train_dp(1, run + " --max-iters 5 --batch-size 8 --resume");
  REQUIRE(one.status == 0);
  CHECK_THAT(one.output, Catch::Contains("note: the checkpoint was trained by 2 data-parallel replicas, this job has 1 "
                                         "data-parallel replica: the same 8 sequences per step"));
}

TEST_CASE("Ctrl-C, then the printed command as it is: the run goes on exactly (--dp 2, GPipe, 2 micro-batches)",
          "[alone]") {
  const int steps = steps_outlasting_ctrl_c(1000);
  const std::string run = common() +
                          fmt::format(" --dp 2 --schedule gpipe --micro-batches 2 --batch-size 4 --max-iters {} "
                                      "--lr-decay-iters {} --ckpt-interval 2 --log-interval 100",
                                      steps, steps);
  auto resumed = ctrl_c_then_printed_resume(TRAIN_PP, 4, run, "pp_uninterrupted", "pp_ctrl_c");
  CHECK_THAT(resumed.output, Catch::Contains("2 pipeline(s) × 2 stages, schedule gpipe, 2 micro-batches of 2"));
  // A layout flag typed again wins, and the log names the change.
  auto changed = train_pp(4, common() + fmt::format(" --resume --max-iters {} --micro-batches 4 --out-dir ", steps + 2) +
                                out("pp_ctrl_c"));
  REQUIRE(changed.status == 0);
  CHECK_THAT(changed.output, Catch::Contains("micro_batches 2 → 4"));
  CHECK_THAT(changed.output, Catch::Contains("2 pipeline(s) × 2 stages, schedule gpipe, 4 micro-batches of 1"));
  // A layout value edited in state.json passes the flag's own check.
  const fs::path state_file = checkpoint("pp_ctrl_c") / "state.json";
  nlohmann::json state = nlohmann::json::parse(std::ifstream(state_file));
  state["train_state"]["options"]["dp"] = "0";
  std::ofstream(state_file) << state.dump(2);
  usage_failure(train_pp(4, common() + fmt::format(" --resume --max-iters {} --out-dir ", steps + 4) + out("pp_ctrl_c")),
                state_file.string() + ": options.dp (what --dp sets) must be a whole number ≥ 1, got 0");
}

TEST_CASE("a stage that dies or skips a send is named by the watchdog, and the job ends") {
  const std::string run = common() + " --batch-size 4 --micro-batches 2 --max-iters 8 --timeout 3";
  auto killed = train_pp(3, run + " --crash-at-step 3 --crash-rank 1 --out-dir " + out("pp_killed"));
  CHECK(killed.status != 0);
  CHECK_THAT(killed.output, Catch::Contains("rank 1 is dead"));
  auto skipped = train_pp(3, run + " --skip-send-at-step 3 --crash-rank 1 --out-dir " + out("pp_skipped"));
  CHECK(skipped.status != 0);
  CHECK(skipped.seconds < 3 + 10);
  CHECK_THAT(skipped.output, Catch::Contains("[watchdog] diagnosis"));
  CHECK_THAT(skipped.output, Catch::Contains("recv") && Catch::Contains("rank 1"));
}

TEST_CASE("bad pipeline input: one line, exit status 2") {
  const std::string run = common() + " --batch-size 4 --out-dir " + out("pp_bad");
  usage_failure(train_pp(3, tiny(shakespeareish(), "data", 2) + " --out-dir " + out("pp_bad")),
                "3 pipeline stages for 2 blocks");
  usage_failure(train_pp(2, run + " --stage-layers 3,2"),
                "--stage-layers adds up to 5 blocks, but the model has n_layer = 4");
  usage_failure(train_pp(2, run + " --stage-layers 4,0"), "every stage needs at least one block, got 0");
  usage_failure(train_pp(2, run + " --stage-layers 5,-1"), "every stage needs at least one block, got -1");
  usage_failure(train_pp(2, run + " --micro-batches 0"), "--micro-batches must be a whole number ≥ 1, got 0");
  usage_failure(train_pp(2, run + " --micro-batches 3"), "--micro-batches 3 does not divide --batch-size 4");
  usage_failure(train_pp(3, run + " --dp 2"), "--dp 2 does not divide the world size 3");
}

TEST_CASE("trace: one row per rank with every micro-batch's forward and backward, in train_pp and train_dp") {
  const fs::path file = work_dir() / "runs" / "pp_trace.json";
  fs::create_directories(file.parent_path());
  auto r = train_pp(3, common() + " --batch-size 8 --micro-batches 4 --trace " + file.string() +
                           " --trace-steps 2 --out-dir " + out("pp_trace"));
  REQUIRE(r.status == 0);
  const auto trace = nlohmann::json::parse(nn::read_whole_file(file));
  std::map<std::pair<int, std::string>, int> count;  // (rank, category) → spans
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") ++count[{e.at("tid").get<int>(), e.at("cat").get<std::string>()}];
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    CHECK(count[{rank, "forward"}] == 4 * 2);  // M micro-batches × 2 steps
    CHECK(count[{rank, "backward"}] == 4 * 2);
    CHECK(count[{rank, "optimizer"}] == 2);
  }
  CHECK(count[{0, "wait"}] > 0);
  const fs::path dp_file = work_dir() / "runs" / "dp_trace.json";
  // Small buckets, moved by the communication thread: each rank's second row (tid 10000 + rank)
  // has every bucket of every traced step, each inside the step and ending after it started.
  REQUIRE(train_dp(2, common() + " --batch-size 4 --bucket-mb 0.1 --progress thread --trace " + dp_file.string() +
                          " --out-dir " + out("dp_trace"))
              .status == 0);
  int dp_forwards = 0;
  std::map<int, std::set<std::string>> buckets;  // communication row → bucket names
  std::map<int, int> bucket_spans;
  std::map<int, std::string> row_names;
  const auto dp_trace = nlohmann::json::parse(nn::read_whole_file(dp_file));
  for (const auto& e : dp_trace.at("traceEvents")) {
    dp_forwards += e.value("cat", "") == "forward";
    if (e.at("ph") == "M") row_names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    if (e.at("ph") == "X" && e.at("tid").get<int>() >= 10000) {
      buckets[e.at("tid").get<int>()].insert(e.at("name").get<std::string>());
      ++bucket_spans[e.at("tid").get<int>()];
      CHECK(e.at("dur").get<double>() >= 0);
      CHECK(e.at("cat") == "comm");
    }
  }
  CHECK(dp_forwards == 2 * 3);  // 2 ranks × the default 3 traced steps
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    CHECK(buckets[10000 + rank].size() >= 3);  // ≥ 3 buckets of ≤ 0.1 MB
    CHECK(bucket_spans[10000 + rank] == 3 * static_cast<int>(buckets[10000 + rank].size()));  // each, every step
    CHECK(row_names[10000 + rank] == fmt::format("rank {} · communication", rank));
  }
}
