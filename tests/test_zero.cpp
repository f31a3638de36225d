// train_dp --zero 1|2|3 end to end, under mpiexec: every stage ends where replicated data
// parallelism (stage 0) ends, for 2, 3 and 4 ranks, with gradient accumulation and active
// clipping; resume within and across stages; the checkpoint keeps nanoGPT's names; and the
// memory each rank holds, counted from the allocator, falls as the paper's formulas say.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <regex>

#include "nn/checkpoint.hpp"
#include "nn/safetensors.hpp"
#include "trainer_test_util.hpp"

namespace {

CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }

// n_embd 34: ln_f holds 34 elements and a block 13940, neither divisible by 3 or 4, so shards
// end in padding and tensors straddle ranks. Clipping at 0.05 is active at every step (the
// norms are ≈ 0.5-1), 2 micro-steps of 4 accumulate, and dropout is on.
std::string zero_run(const std::string& extra) {
  return tiny(shakespeareish(), "data") +
         " --n-embd 34 --max-iters 5 --batch-size 4 --grad-accum 2 --grad-clip 0.05 --dropout 0.1 " + extra;
}

// Float sums in another order (reduce-scatter vs allreduce, the norm shard by shard) differ in
// the last bits; far below one step's change (≈ lr = 1e-3).
constexpr float kTolerance = 2e-5f;

// "106 KiB" → bytes (nn::format_bytes' units).
double bytes_of(const std::string& text) {
  static const std::map<std::string, double> unit = {{"B", 1}, {"KiB", 1024}, {"MiB", 1024.0 * 1024}, {"GiB", 1 << 30}};
  std::smatch m;
  REQUIRE(std::regex_match(text, m, std::regex(R"(([0-9.]+) (B|KiB|MiB|GiB))")));
  return std::stod(m[1]) * unit.at(m[2]);
}

struct Memory {
  double parameters, gradients, optimizer, peak;
};

// "each rank sends ≈ X MB (formula Y MB" → {X, Y}.
std::pair<double, double> traffic_of(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex(R"(each rank sends ≈ ([0-9.]+) MB \(formula ([0-9.]+) MB)")));
  return {std::stod(m[1]), std::stod(m[2])};
}

Memory memory_of_rank0(const std::string& output) {
  std::smatch m;
  const std::regex line(
      R"(memory rank 0 \(allocator\): parameters ([^,]+), gradients ([^,]+), optimizer ([^=]+) = [^;]+; step peak ([^,]+),)");
  REQUIRE(std::regex_search(output, m, line));
  return {bytes_of(m[1]), bytes_of(m[2]), bytes_of(m[3]), bytes_of(m[4])};
}

}  // namespace

TEST_CASE("every ZeRO stage ends where stage 0 and one rank end: 2, 3, 4 ranks, accumulation, clipping, uneven shards") {
  for (int N : {2, 3, 4}) {
    const std::string reference = fmt::format("zero0_n{}", N);
    auto r0 = train_dp(N, zero_run("--zero 0 --out-dir " + out(reference)));
    REQUIRE(r0.status == 0);
    CHECK_THAT(r0.output, Catch::Contains("norm 0."));  // above the clip: clipping is active
    // One rank with the same global batch (N·4 per micro-step): the same samples and masks.
    const std::string one = fmt::format("zero_one_rank_b{}", 4 * N);
    REQUIRE(train_dp(1, zero_run(fmt::format("--batch-size {} --out-dir {}", 4 * N, out(one)))).status == 0);
    CHECK(max_difference(checkpoint(reference), checkpoint(one)) <= kTolerance);
    for (int stage : {1, 2, 3}) {
      INFO("N = " << N << ", stage " << stage);
      const std::string name = fmt::format("zero{}_n{}", stage, N);
      // the hand-written ring's reduce-scatter and shm's too
      const char* backend = stage == 2 ? "ring" : stage == 3 ? "shm" : "mpi";
      auto r = train_dp(N, zero_run(fmt::format("--zero {} --backend {} --out-dir {}", stage, backend, out(name))));
      REQUIRE(r.status == 0);
      CHECK_THAT(r.output, Catch::Contains(fmt::format("ZeRO stage {} over {} ranks", stage, N)));
      CHECK(max_difference(checkpoint(name), checkpoint(reference)) <= kTolerance);
    }
  }
  SECTION("the comparison has teeth: without clipping the run ends elsewhere") {
    REQUIRE(train_dp(2, zero_run("--zero 3 --grad-clip 0 --out-dir " + out("zero3_noclip"))).status == 0);
    CHECK(max_difference(checkpoint("zero3_noclip"), checkpoint("zero0_n2")) > 10 * kTolerance);
  }
}

TEST_CASE("ZeRO checkpoints: nanoGPT's names, resume bit-exact within a stage, close across stages and rank counts") {
  const std::string common = zero_run("--ckpt-interval 2 --lr-decay-iters 8 --dropout 0.1");
  // Within a stage: 4 steps, then 4 resumed, equal 8 in one run, bit for bit.
  for (int stage : {2, 3}) {
    const std::string straight = fmt::format("zs_straight{}", stage), resumed = fmt::format("zs_resumed{}", stage);
    const std::string flags = fmt::format("{} --zero {} --max-iters ", common, stage);
    REQUIRE(train_dp(2, flags + "8 --out-dir " + out(straight)).status == 0);
    REQUIRE(train_dp(2, flags + "4 --out-dir " + out(resumed)).status == 0);
    REQUIRE(train_dp(2, flags + "8 --resume --out-dir " + out(resumed)).status == 0);
    CHECK(same_bytes(checkpoint(straight) / "model.safetensors", checkpoint(resumed) / "model.safetensors"));
    CHECK(same_bytes(checkpoint(straight) / "optimizer.safetensors", checkpoint(resumed) / "optimizer.safetensors"));
  }
  // The same tensors under the same names as a stage-0 checkpoint, model and optimizer.
  REQUIRE(train_dp(2, common + " --zero 0 --max-iters 8 --out-dir " + out("zs_straight0")).status == 0);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    auto names = [&](const std::string& run) { return nn::SafetensorsReader(checkpoint(run) / file).names(); };
    CHECK(names("zs_straight3") == names("zs_straight0"));
  }
  CHECK(max_difference(checkpoint("zs_straight3"), checkpoint("zs_straight0")) <= kTolerance);

  // Across stages: a stage-1 checkpoint at step 4 resumed under stage 3 ends where stage 0 does.
  REQUIRE(train_dp(2, common + " --zero 1 --max-iters 4 --out-dir " + out("zs_across")).status == 0);
  auto r = train_dp(2, common + " --zero 3 --max-iters 8 --resume --out-dir " + out("zs_across"));
  REQUIRE(r.status == 0);
  CHECK(max_difference(checkpoint("zs_across"), checkpoint("zs_straight0")) <= kTolerance);

  // Another rank count (another global batch, so another run): stage 2 on 3 ranks resumes a
  // 2-rank checkpoint, as stage 0 on 3 ranks does, and both end in the same place.
  for (int stage : {0, 2}) {
    const std::string name = fmt::format("zs_three{}", stage);
    REQUIRE(train_dp(2, common + " --zero 1 --max-iters 4 --out-dir " + out(name)).status == 0);
    auto resumed =
        train_dp(3, common + fmt::format(" --zero {} --max-iters 8 --resume --out-dir {}", stage, out(name)));
    REQUIRE(resumed.status == 0);
    CHECK(nn::read_checkpoint_info(checkpoint(name)).train_state.at("step") == 8);
  }
  CHECK(max_difference(checkpoint("zs_three2"), checkpoint("zs_three0")) <= kTolerance);
}

TEST_CASE("stage 3 evaluates and samples with every parameter gathered") {
  auto r = train_dp(2, zero_run("--zero 3 --eval-interval 2 --sample-tokens 40 --out-dir " + out("zero3_sample")));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("step 4: train loss"));
  CHECK_THAT(r.output, Catch::Contains("---- sample at step 5 ----"));
}

TEST_CASE("the memory a rank holds, counted from the allocator, falls as the formulas say") {
  // Wide and short, so parameters outweigh activations: Ψ ≈ 1.6M, 16Ψ ≈ 25 MB.
  const std::string model =
      tiny(shakespeareish()) + " --n-embd 256 --n-head 2 --batch-size 2 --max-iters 1 --no-full-val";
  std::map<std::pair<int, int>, Memory> at;                       // (ranks, stage)
  std::map<std::pair<int, int>, std::pair<double, double>> sent;  // counted by the communicator, formula
  double psi = 0;
  for (int N : {2, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      auto r =
          train_dp(N, model + fmt::format(" --zero {} --out-dir {}", stage, out(fmt::format("mem{}_{}", N, stage))));
      REQUIRE(r.status == 0);
      at[{N, stage}] = memory_of_rank0(r.output);
      sent[{N, stage}] = traffic_of(r.output);
    }
    const Memory& replicated = at[{N, 0}];
    psi = replicated.parameters / 4;
    INFO("N = " << N << ", Ψ = " << psi);
    const double slack = 0.02;  // 3 significant digits in the log, and < N padding elements per group
    auto near = [&](double got, double want) { return std::abs(got - want) <= slack * want; };
    CHECK(near(replicated.gradients, 4 * psi));
    CHECK(near(replicated.optimizer, 8 * psi));
    CHECK(near(at[{N, 1}].optimizer, 8 * psi / N));            // stage 1: the moments of one shard
    CHECK(near(at[{N, 1}].gradients, 4 * psi));                // full gradients, the average over this rank's stretch
    CHECK(near(at[{N, 2}].gradients, 4 * psi / N));            // stage 2: only the gradient shard
    CHECK(near(at[{N, 2}].parameters, 4 * psi));
    CHECK(near(at[{N, 3}].parameters, 4 * psi / N));  // stage 3: only the parameter shard
    CHECK(near(at[{N, 3}].gradients + at[{N, 3}].optimizer + at[{N, 3}].parameters, 16 * psi / N));
    // The step's peak — activations and the communication buffers of a group or two on top —
    // is lowest at stage 3 (stages 1-2 gather the new parameters through a flat buffer).
    CHECK(at[{N, 3}].peak < at[{N, 0}].peak);
    CHECK(at[{N, 3}].peak < at[{N, 1}].peak);
    CHECK(at[{N, 3}].peak < at[{N, 2}].peak);
  }
  CHECK(at[{4, 2}].peak < at[{4, 0}].peak);
  CHECK(at[{4, 3}].peak < at[{2, 3}].peak);
  for (int stage : {1, 2, 3}) CHECK(at[{4, stage}].optimizer < at[{2, stage}].optimizer);
  // What the communicator counted in the step equals the formula: 2Ψ for stages 0-2, 3Ψ for
  // stage 3 (a little more: wte is gathered again for lm_head), × (N−1)/N per rank.
  for (const auto& [key, counted] : sent) {
    INFO("N = " << key.first << ", stage " << key.second << ": counted " << counted.first << " MB, formula "
                << counted.second);
    CHECK(counted.first >= counted.second * 0.99);
    CHECK(counted.first <= counted.second * 1.05);
  }
}

TEST_CASE("bad --zero: one line, exit status 2") {
  usage_failure(train_dp(2, zero_run("--zero 4 --out-dir " + out("zero_bad"))), "--zero");
}

TEST_CASE("a rank killed in a ZeRO-3 step is named by the watchdog, the gathered checkpoint survives and resumes") {
  const std::string common = zero_run("--zero 3 --ckpt-interval 2 --timeout 5");
  auto r = train_dp(3, common + " --crash-at-step 3 --crash-rank 2 --out-dir " + out("zero3_killed"));
  CHECK(r.status != 0);
  CHECK(r.seconds < 5 + 10);
  CHECK_THAT(r.output, Catch::Contains("rank 2 is dead"));
  CHECK(nn::read_checkpoint_info(checkpoint("zero3_killed")).train_state.at("step") == 2);
  auto resumed = run_trainer_after_crash(TRAIN_DP, 3, common + " --resume --out-dir " + out("zero3_killed"));
  CHECK(resumed.status == 0);
  CHECK(nn::read_checkpoint_info(checkpoint("zero3_killed")).train_state.at("step") == 5);
}
