// train_dp's checkpoints: bit-exact resume, what a resume keeps and what a flag overrides,
// values loaded checked like flags, --eval-only and --sample-only, a diverged run and a
// killed rank leaving the last good checkpoint.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

#include "nn/atomic_file.hpp"
#include "nn/checkpoint.hpp"
#include "nn/rng.hpp"
#include "train_dp_cases.hpp"
#include "trainers/batches.hpp"

TEST_CASE("resume: T steps and then T resumed steps end bit-identical to 2T steps in one run") {
  // With dropout, so the random streams must continue exactly too.
  const std::string common = tiny(shakespeareish()) + " --dropout 0.1 --lr-decay-iters 8 --ckpt-interval 2";
  for (auto [N, extra] : {std::pair{1, std::string("")}, std::pair{2, std::string(" --ddp bucketed --backend ring")}}) {
    const std::string straight = fmt::format("straight_{}", N), resumed = fmt::format("resumed_{}", N);
    REQUIRE(train_dp(N, common + extra + " --max-iters 8 --out-dir " + out(straight)).status == 0);
    REQUIRE(train_dp(N, common + extra + " --max-iters 4 --out-dir " + out(resumed)).status == 0);
    auto r = train_dp(N, common + extra + " --max-iters 8 --resume --out-dir " + out(resumed));
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("at step 4"));
    CHECK(same_bytes(checkpoint(straight) / "model.safetensors", checkpoint(resumed) / "model.safetensors"));
    CHECK(same_bytes(checkpoint(straight) / "optimizer.safetensors", checkpoint(resumed) / "optimizer.safetensors"));
    CHECK(nn::read_checkpoint_info(checkpoint(resumed)).train_state.at("step") == 8);
  }
}

TEST_CASE("eval-only prints the exact val loss (the same on any rank count) and sample-only prints text") {
  const std::string common = tiny(shakespeareish());
  REQUIRE(train_dp(2, common + " --max-iters 3 --out-dir " + out("eval")).status == 0);
  auto value = [](const std::string& output) { return std::stod(printed_val_loss_full(output)); };
  auto one = train_dp(1, common + " --eval-only --init-from " + checkpoint("eval").string());
  auto three = train_dp(3, common + " --eval-only --init-from " + checkpoint("eval").string());
  REQUIRE(one.status == 0);
  REQUIRE(three.status == 0);
  CHECK(value(one.output) == Approx(value(three.output)).epsilon(1e-6));
  CHECK(value(one.output) > 1.0);  // 3 steps: far from trained
  CHECK(value(one.output) < 4.0);  // below a uniform guess over ~30 characters (ln 30 = 3.4) plus slack

  // --precision, --attention and --fusion reach --eval-only as they reach training: bf16 products give
  // other digits than fp32 (a run that ignored the flag would print the fp32 loss again).
  auto bf16 = train_dp(2, common + " --precision bf16 --eval-only --init-from " + checkpoint("eval").string());
  auto naive = train_dp(2, common + " --attention naive --eval-only --init-from " + checkpoint("eval").string());
  REQUIRE(bf16.status == 0);
  REQUIRE(naive.status == 0);
  CHECK_THAT(bf16.output, Catch::Contains("bf16 matrix multiplies"));
  CHECK_THAT(one.output, Catch::Contains("fp32 matrix multiplies") && Catch::Contains("fused attention"));
  CHECK_THAT(naive.output, Catch::Contains("naive attention"));
  CHECK(value(bf16.output) != value(one.output));
  CHECK(value(bf16.output) == Approx(value(one.output)).epsilon(1e-2));  // within bf16's rounding
  CHECK(value(naive.output) == Approx(value(one.output)).epsilon(1e-5));
  // --fusion separate (every trainer takes it, as gpt_bench): the separate ops, the same bits.
  auto separate = train_dp(2, common + " --fusion separate --eval-only --init-from " + checkpoint("eval").string());
  REQUIRE(separate.status == 0);
  CHECK_THAT(separate.output, Catch::Contains("separate elementwise kernels"));
  CHECK_THAT(one.output, Catch::Contains("fused elementwise kernels"));
  CHECK(value(separate.output) == value(one.output));

  auto sample =
      train_dp(1, "--sample-only --sample-tokens 40 --prompt 'the king' --init-from " + checkpoint("eval").string());
  REQUIRE(sample.status == 0);
  CHECK_THAT(sample.output, Catch::StartsWith("the king"));
  CHECK(sample.output.size() >= 48);
}

TEST_CASE("a rank killed mid-training: the others stop with the watchdog's report, the checkpoint survives") {
  const std::string common = tiny(shakespeareish()) + " --ckpt-interval 2 --max-iters 8";
  fs::remove_all(out("killed"));
  auto r = train_dp(3, common + " --crash-at-step 5 --crash-rank 1 --out-dir " + out("killed"));
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Catch::Contains("rank 1 is dead"));
  // The last checkpoint (step 4) is intact and resumable.
  const nn::CheckpointInfo info = nn::read_checkpoint_info(checkpoint("killed"));
  CHECK(info.train_state.at("step") == 4);
  auto resumed = run_trainer_after_crash(TRAIN_DP, 3, common + " --resume --out-dir " + out("killed"));
  CHECK(resumed.status == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resuming from") && Catch::Contains("at step 4"));
  CHECK(nn::read_checkpoint_info(checkpoint("killed")).train_state.at("step") == 8);
}


TEST_CASE("a diverged run stops with one line, exit non-zero, and the previous checkpoint survives") {
  const std::string common = tiny(shakespeareish()) + " --ckpt-interval 2";
  REQUIRE(train_dp(2, common + " --max-iters 2 --out-dir " + out("diverge")).status == 0);
  const auto good = nn::read_whole_file(checkpoint("diverge") / "model.safetensors");
  auto r =
      train_dp(2, common + " --resume --max-iters 8 --learning-rate 1e30 --grad-clip 0 --out-dir " + out("diverge"));
  usage_failure(r, "training diverged at step");
  CHECK_THAT(r.output, Catch::Contains("the checkpoint of step 2"));
  CHECK(nn::read_whole_file(checkpoint("diverge") / "model.safetensors") == good);
  CHECK(nn::read_checkpoint_info(checkpoint("diverge")).train_state.at("step") == 2);
  // The kept checkpoint still evaluates.
  auto eval = train_dp(1, common + " --eval-only --init-from " + checkpoint("diverge").string());
  CHECK(eval.status == 0);
  CHECK_THAT(eval.output, Catch::Contains("val_loss_full="));
}

TEST_CASE("values loaded from a checkpoint pass their flags' checks: one line naming state.json and the key") {
  const std::string common = tiny(shakespeareish());
  static const bool trained = train_dp(2, common + " --max-iters 2 --out-dir " + out("edit_me")).status == 0;
  REQUIRE(trained);
  const fs::path state_file = checkpoint("edited") / "state.json";
  // A copy of the good checkpoint with one value of state.json replaced, then --resume.
  auto resume_edited = [&](const std::string& pointer, const nlohmann::json& value) {
    fs::remove_all(out("edited"));
    fs::create_directories(out("edited"));
    fs::copy(checkpoint("edit_me"), checkpoint("edited"));
    nlohmann::json state = nlohmann::json::parse(std::ifstream(state_file));
    state[nlohmann::json::json_pointer(pointer)] = value;
    std::ofstream(state_file) << state.dump(2);
    return train_dp(2, common + " --resume --max-iters 4 --out-dir " + out("edited"));
  };
  const std::string where = state_file.string() + ": ";
  usage_failure(resume_edited("/train_state/step", -5),
                where + "step must be a whole number from 0 to 2147483647, got -5");
  usage_failure(resume_edited("/train_state/step", 1e30),
                where + "step must be a whole number from 0 to 2147483647, got 1e+30");
  usage_failure(resume_edited("/train_state/options/batch_size", 0),
                where + "options.batch_size (what --batch-size sets) must be a whole number ≥ 1, got 0");
  usage_failure(resume_edited("/train_state/options/min_lr", -1),
                where + "options.min_lr (what --min-lr sets) must be a number ≥ 0, got -1");
  // A flag typed again replaces the loaded value before any check: tiny() types --learning-rate.
  CHECK(resume_edited("/train_state/options/learning_rate", -1).status == 0);
  usage_failure(resume_edited("/train_state/options/sampling", "sideways"), where + "options.sampling");
  usage_failure(resume_edited("/config/n_layer", 1e300),
                where + "GPT config: field 'n_layer' must be a whole number from 1 to 2147483647, got 1e+300");
  usage_failure(
      resume_edited("/config/vocab_size", 1e12),
      where + "GPT config: field 'vocab_size' must be a whole number from 1 to 2147483647, got 1000000000000.0");
  usage_failure(resume_edited("/optimizer/steps", -3), where + "optimizer.steps must be a whole number ≥ 0, got -3");
  // The flag's rule for dropout (≤ 0.99), not a looser one of its own.
  usage_failure(resume_edited("/config/dropout", 0.995), "dropout must be a number ≥ 0 and ≤ 0.99, got 0.995");
  usage_failure(resume_edited("/train_state", 5), where + "train_state must be an object, got 5");
  usage_failure(resume_edited("/train_state/options", nlohmann::json::array()),
                where + "train_state.options must be an object of settings, got []");
  // An empty value is a value, checked as the flag checks it (null alone means "the default").
  usage_failure(resume_edited("/train_state/options/grad_comm", ""), where + "options.grad_comm (what --grad-comm sets)");
  // The two step counters disagree: edited, or mixed from two runs.
  usage_failure(resume_edited("/train_state/step", 1), where + "train_state.step 1 and optimizer.steps 2 disagree");
  {  // A setting missing from the checkpoint: the command line's value stands, and the log says so.
    fs::remove_all(out("edited"));
    fs::create_directories(out("edited"));
    fs::copy(checkpoint("edit_me"), checkpoint("edited"));
    nlohmann::json state = nlohmann::json::parse(std::ifstream(state_file));
    state["train_state"]["options"].erase("precision");
    std::ofstream(state_file) << state.dump(2);
    auto r = train_dp(2, common + " --resume --max-iters 3 --out-dir " + out("edited"));
    CHECK(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("precision (not in the checkpoint) → fp32"));
  }
  usage_failure(resume_edited("/train_state/vocabulary", 5), "the checkpoint's vocabulary is not text: 5");
  // Training from a checkpoint's weights (no --resume, no --eval-only) is said, not silent.
  auto tuned = train_dp(
      2, common + " --max-iters 1 --init-from " + checkpoint("edit_me").string() + " --out-dir " + out("fine_tuned"));
  CHECK(tuned.status == 0);
  CHECK_THAT(tuned.output, Catch::Contains("fine-tuning from " + checkpoint("edit_me").string() +
                                           ": its weights, a fresh optimizer, from step 0"));
}

TEST_CASE("resume continues the checkpoint's run: its schedule and settings, unless a flag overrides them") {
  const fs::path text = shakespeareish();
  // Everything but the data and the machine comes from the checkpoint when resuming.
  const std::string data = fmt::format(
      "--text {} --data-dir {} --threads 1 --timeout 30 --eval-interval 0 --eval-iters 2 "
      "--no-full-val --sample-tokens 0 --log-interval 1",
      text.string(), (work_dir() / "data").string());
  const std::string run = tiny(text) +
                          " --learning-rate 3e-3 --warmup-iters 1 --min-lr 1e-4 --batch-size 6 --max-iters 8 "
                          "--ckpt-interval 4 --dropout 0.1";
  REQUIRE(train_dp(2, run + " --out-dir " + out("settings_straight")).status == 0);
  // The same run, stopped by a kill at step 5 (checkpoint at 4), resumed by a bare --resume.
  auto killed = train_dp(2, run + " --crash-at-step 5 --crash-rank 1 --out-dir " + out("settings_resumed"));
  REQUIRE(killed.status != 0);
  auto resumed = run_trainer_after_crash(TRAIN_DP, 2, data + " --resume --out-dir " + out("settings_resumed"));
  REQUIRE(resumed.status == 0);
  CHECK_THAT(resumed.output, Catch::Contains("at step 4 of 8, with the checkpoint's settings"));
  CHECK_THAT(resumed.output, !Catch::Contains("note: flags change"));
  CHECK(same_bytes(checkpoint("settings_straight") / "model.safetensors",
                   checkpoint("settings_resumed") / "model.safetensors"));
  // A flag typed again overrides the checkpoint, and the log says so.
  auto longer =
      train_dp(2, data + " --resume --max-iters 10 --learning-rate 1e-3 --out-dir " + out("settings_resumed"));
  REQUIRE(longer.status == 0);
  CHECK_THAT(longer.output,
             Catch::Contains("note: flags change the run's settings: max_iters 8 → 10, learning_rate 0.003 → 0.001"));
  CHECK(nn::read_checkpoint_info(checkpoint("settings_resumed")).train_state.at("step") == 10);
}
