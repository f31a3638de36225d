// train_dp end to end, under mpiexec: data-parallel equivalence, gradient accumulation,
// bit-exact resume, bad input, a killed rank. Each case runs the real program on a small
// synthetic text with a tiny GPT and compares the checkpoints it leaves.
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
#include "run_command.hpp"
#include "trainer_test_util.hpp"
#include "trainers/batches.hpp"

namespace fs = std::filesystem;

namespace {

CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }

// Data-parallel runs are compared after kSteps optimizer steps. Float sums in another order
// differ in the last bits; the tolerance is far below one step's change (≈ lr = 1e-3).
constexpr int kSteps = 5;
constexpr float kTolerance = 2e-5f;

}  // namespace

TEST_CASE("partition sampling deals one global batch out in disjoint slices") {
  std::vector<int32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  const int T = 8, B = 3;
  for (int N : {2, 3}) {
    trainers::BatchSampler whole(tokens, T, N * B, 1, trainers::Sampling::partition, 7, 0, 1);
    for (int64_t step : {0, 1, 40}) {  // step 40 crosses into the next epoch (124 windows)
      trainers::Batch global, part;
      whole.fill(step, 0, global);
      std::vector<int32_t> joined;
      for (int r = 0; r < N; ++r) {
        trainers::BatchSampler rank(tokens, T, B, 1, trainers::Sampling::partition, 7, r, N);
        rank.fill(step, 0, part);
        joined.insert(joined.end(), part.ids.begin(), part.ids.end());
        for (std::size_t i = 0; i < part.ids.size(); ++i) CHECK(part.targets[i] == part.ids[i] + 1);
      }
      CHECK(joined == global.ids);
    }
  }
}

TEST_CASE("random sampling draws one global batch too: any ranks × micro-batches, the same samples") {
  std::vector<int32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  const int T = 8;
  auto global_batch = [&](int ranks, int micro_steps, int B, int64_t step) {
    std::vector<int32_t> joined(static_cast<std::size_t>(ranks * micro_steps * B * T));
    trainers::Batch part;
    for (int r = 0; r < ranks; ++r) {
      trainers::BatchSampler sampler(tokens, T, B, micro_steps, trainers::Sampling::random, 7, r, ranks);
      for (int m = 0; m < micro_steps; ++m) {
        sampler.fill(step, m, part);
        for (std::size_t i = 0; i < part.ids.size(); ++i) REQUIRE(part.targets[i] == part.ids[i] + 1);
        // sample j of the global batch at j·T
        std::copy(part.ids.begin(), part.ids.end(), joined.begin() + sampler.first_sample(m) * T);
      }
    }
    return joined;
  };
  const std::vector<int32_t> one_rank = global_batch(1, 1, 12, 3);
  CHECK(global_batch(2, 1, 6, 3) == one_rank);
  CHECK(global_batch(3, 2, 2, 3) == one_rank);
  CHECK(global_batch(1, 4, 3, 3) == one_rank);
  CHECK(global_batch(1, 1, 12, 4) != one_rank);  // another step, other samples
}

TEST_CASE("N ranks with micro-batch B end where 1 rank with batch N·B ends, with dropout and random sampling") {
  // The defaults' random sampling and dropout: the global batch and every mask are the same on any rank count.
  const std::string common = tiny(shakespeareish()) + fmt::format(" --dropout 0.1 --max-iters {}", kSteps);
  for (int N : {2, 3}) {
    const std::string reference = fmt::format("ref_{}", N);
    REQUIRE(train_dp(1, common + fmt::format(" --batch-size {} --out-dir {}", 4 * N, out(reference))).status == 0);
    for (std::string ddp : {"naive", "bucketed"})
      for (std::string backend : {"mpi", "ring", "shm"}) {
        const std::string name = fmt::format("dp{}_{}_{}", N, ddp, backend);
        // A small bucket size makes several buckets, so overlap really happens.
        auto r = train_dp(N, common + fmt::format(" --batch-size 4 --ddp {} --bucket-mb 0.01 --backend {} --out-dir {}",
                                                  ddp, backend, out(name)));
        REQUIRE(r.status == 0);
        CHECK_THAT(r.output, Catch::Contains(fmt::format("global batch: {} ranks × micro-batch 4", N)));
        const float diff = max_difference(checkpoint(name), checkpoint(reference));
        INFO(name << ": largest parameter difference from 1 rank × batch " << 4 * N << " is " << diff);
        CHECK(diff <= kTolerance);
      }
  }
  SECTION("the comparison has teeth: other data (partition sampling) ends far away, and so do other masks") {
    REQUIRE(train_dp(2, common + " --batch-size 4 --sampling partition --out-dir " + out("dp2_partition")).status == 0);
    CHECK(max_difference(checkpoint("dp2_partition"), checkpoint("ref_2")) > 100 * kTolerance);
    REQUIRE(train_dp(2, common + " --batch-size 4 --dropout 0.11 --out-dir " + out("dp2_other_masks")).status == 0);
    CHECK(max_difference(checkpoint("dp2_other_masks"), checkpoint("ref_2")) > 100 * kTolerance);
  }
}

// --progress thread runs each bucket's allreduce (ZeRO's reduce-scatters and allgathers) on the
// communication thread, as the blocking collective of the same backend: the same sums, so the
// same bytes as caller progress, on every backend.
TEST_CASE("the communication thread (--progress thread): the same model and optimizer bytes as caller progress") {
  const std::string common = tiny(shakespeareish()) + fmt::format(" --batch-size 4 --max-iters {}", kSteps);
  for (const std::string layout : {"--ddp bucketed --bucket-mb 0.01", "--zero 3"})
    for (const std::string backend : {"shm", "ring", "mpi"}) {
      std::string names[2];
      for (const std::string progress : {"caller", "thread"}) {
        const std::string name = fmt::format("progress_{}_{}_{}", layout.substr(2, 3), backend, progress);
        auto r = train_dp(2, common + fmt::format(" {} --backend {} --progress {} --out-dir {}", layout, backend,
                                                  progress, out(name)));
        REQUIRE(r.status == 0);
        if (layout.find("bucketed") != std::string::npos)
          CHECK_THAT(r.output, Catch::Contains(progress == "thread" ? "moved by the communication thread"
                                                                    : "moved when backward tests it"));
        names[progress == "thread"] = name;
      }
      INFO(layout << " on " << backend);
      CHECK(same_bytes(checkpoint(names[0]) / "model.safetensors", checkpoint(names[1]) / "model.safetensors"));
      CHECK(same_bytes(checkpoint(names[0]) / "optimizer.safetensors",
                       checkpoint(names[1]) / "optimizer.safetensors"));
    }
  SECTION("a bad value is one line naming it") {
    usage_failure(run_command("env NANODIST_PROGRESS=soon " + mpirun(2, TRAIN_DP, common)),
                  "--progress: soon not in {caller,thread}");
  }
}

TEST_CASE("K accumulation steps of batch B equal one step of batch K·B (partition sampling, dropout)") {
  const std::string common =
      tiny(shakespeareish()) + fmt::format(" --sampling partition --dropout 0.1 --max-iters {}", kSteps);
  REQUIRE(train_dp(1, common + " --batch-size 8 --out-dir " + out("acc_ref8")).status == 0);
  REQUIRE(train_dp(1, common + " --batch-size 16 --out-dir " + out("acc_ref16")).status == 0);
  auto r = train_dp(1, common + " --batch-size 4 --grad-accum 2 --out-dir " + out("acc_1x2"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("1 ranks × micro-batch 4 × 2 accumulation step(s) × block 16 = 128 tokens"));
  CHECK(max_difference(checkpoint("acc_1x2"), checkpoint("acc_ref8")) <= kTolerance);
  // With ranks: 2 ranks × 2 micro-steps × 4 = 16, both averaging implementations.
  for (std::string ddp : {"naive", "bucketed"}) {
    const std::string name = "acc_2x2_" + ddp;
    REQUIRE(
        train_dp(2, common + " --batch-size 4 --grad-accum 2 --bucket-mb 0.01 --ddp " + ddp + " --out-dir " + out(name))
            .status == 0);
    CHECK(max_difference(checkpoint(name), checkpoint("acc_ref16")) <= kTolerance);
  }
}

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
  auto value = [](const std::string& output) {
    const auto at = output.find("val_loss_full=");
    REQUIRE(at != std::string::npos);
    return std::stod(output.substr(at + 14));
  };
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

TEST_CASE("the metrics file has a row per log line and per evaluation") {
  const std::string csv = (work_dir() / "runs" / "metrics" / "m.csv").string();
  fs::remove(csv);
  auto r = train_dp(2, tiny(shakespeareish()) + " --max-iters 4 --log-interval 2 --eval-interval 2 --out-dir " +
                           out("metrics") + " --metrics " + csv);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("tok/s") && Catch::Contains("eta") && Catch::Contains("comm"));
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  CHECK_THAT(header, Catch::StartsWith("kind,step,loss,lr,grad_norm,step_ms,data_ms,forward_ms,backward_ms,comm_ms"));
  int train_rows = 0, eval_rows = 0;
  while (std::getline(in, line)) {
    train_rows += line.starts_with("train,");
    eval_rows += line.starts_with("eval,");
  }
  CHECK(train_rows == 2);
  CHECK(eval_rows == 2);  // step 2 and the end
}

TEST_CASE("bad input: one line naming the problem and a non-zero exit") {
  const fs::path text = shakespeareish();
  const std::string common = tiny(text);
  static const bool trained = train_dp(2, common + " --max-iters 2 --out-dir " + out("good")).status == 0;
  REQUIRE(trained);

  SECTION("missing data") {
    const fs::path empty = work_dir() / "empty";
    fs::create_directories(empty);
    auto r = run_command("env -u NANODIST_DATA_MIRROR NANODIST_NO_DOWNLOAD=1 " +
                         mpirun(2, TRAIN_DP, "--data-dir " + empty.string() + " --out-dir " + out("nodata")));
    clean_failure(r, "no Shakespeare text");
    clean_failure(train_dp(1, "--text /no/such/file.txt --out-dir " + out("nodata")),
                  "--text /no/such/file.txt: no such file");
  }
  SECTION("a data folder that cannot be written: one line naming --data-dir, not the filesystem's exception") {
    const fs::path blocker = work_dir() / "a_file_not_a_folder";
    std::ofstream(blocker) << "x";
    const std::string under_a_file = (blocker / "data").string();
    auto r = train_dp(2, common + " --data-dir " + under_a_file + " --out-dir " + out("unwritable_data"));
    usage_failure(r, "--data-dir " + under_a_file + ": cannot write the prepared data there (Not a directory)");
    CHECK_THAT(r.output, !Catch::Contains("filesystem error"));
  }
  SECTION("a corrupt checkpoint") {
    fs::remove_all(out("corrupt"));
    fs::create_directories(out("corrupt"));
    fs::copy(checkpoint("good"), checkpoint("corrupt"));
    {
      std::fstream f(checkpoint("corrupt") / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-7, std::ios::end);
      f.put('\x5a');
    }
    clean_failure(train_dp(2, common + " --resume --max-iters 4 --out-dir " + out("corrupt")), "checksum");
  }
  SECTION("a checkpoint whose config contradicts the flags") {
    clean_failure(train_dp(2, common + " --n-layer 3 --eval-only --init-from " + checkpoint("good").string()),
                  "the checkpoint has n_layer=2 but the flags ask for n_layer=3");
  }
  SECTION("block_size longer than the data") {
    const fs::path small = synthetic_text("small.txt", {"ab", "ba"}, 40);  // ~120 chars: val has ~12
    clean_failure(train_dp(2, tiny(small, "data_small") + " --out-dir " + out("small")),
                  "--block-size 16 is longer than the data: the val split");
  }
  SECTION("a vocabulary mismatch") {
    const fs::path other = synthetic_text("other.txt", {"xyz", "zyx", "q"}, 3000);
    clean_failure(train_dp(2, tiny(other, "data_other") + " --eval-only --init-from " + checkpoint("good").string()),
                  "vocabulary mismatch");
  }
  SECTION("nonsense flag values") {
    clean_failure(train_dp(2, common + " --batch-size 0"), "--batch-size");
    clean_failure(train_dp(2, common + " --ddp fancy"), "--ddp");
    clean_failure(train_dp(2, common + " --grad-comm fp16"), "--grad-comm");
    clean_failure(train_dp(2, common + " --precision fp16"), "--precision");
    clean_failure(train_dp(2, common + " --max-iters many"), "--max-iters");
    clean_failure(train_dp(2, common + " --n-embd 30 --n-head 4"), "n_embd");
    clean_failure(train_dp(2, common + " --eval-only"), "--eval-only needs --init-from");
    clean_failure(train_dp(2, common + " --prompt 'QUEEN:'"), "--prompt: the character \"Q\"");
    clean_failure(train_dp(2, common + " --resume --out-dir " + out("never")), "no checkpoint");
  }
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
  auto resumed = train_dp(3, common + " --resume --out-dir " + out("killed"));
  CHECK(resumed.status == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resuming from") && Catch::Contains("at step 4"));
  CHECK(nn::read_checkpoint_info(checkpoint("killed")).train_state.at("step") == 8);
}

// ---- hardening: data, divergence, metrics, outputs, resume, interrupts -------------------

namespace {

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> folders_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE(
    "a --text gets its own prepared folder: the default data is never replaced, a failed preparation leaves nothing") {
  // The "default" text comes from a mirror folder, as tiny Shakespeare does in CI.
  const fs::path mirror = work_dir() / "mirror", data = work_dir() / "data_cache";
  fs::remove_all(data);
  fs::create_directories(mirror / "tinyshakespeare");
  fs::copy_file(shakespeareish(), mirror / "tinyshakespeare" / "input.txt", fs::copy_options::overwrite_existing);
  const std::string quiet =
      "--n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --eval-iters 1 --no-full-val "
      "--sample-tokens 0 --threads 1 --timeout 30 --max-iters 1 --data-dir " +
      data.string();
  auto with_mirror = [&](const std::string& args) {
    CommandResult r = run_command("env NANODIST_NO_DOWNLOAD=1 NANODIST_DATA_MIRROR=" + mirror.string() + " " +
                                  mpirun(2, TRAIN_DP, quiet + " " + args));
    UNSCOPED_INFO("$ train_dp " << args << "\n" << r.output);
    return r;
  };
  auto first = with_mirror("--out-dir " + out("cache_default"));
  REQUIRE(first.status == 0);
  CHECK_THAT(first.output,
             Catch::Contains("prepared now from " + (mirror / "tinyshakespeare" / "input.txt").string() + " (mirror)"));
  const fs::path cache = data / "shakespeare_char";
  const auto meta = nn::read_whole_file(cache / "meta.json"), train = nn::read_whole_file(cache / "train.bin");

  // Another text, in a run that succeeds and in one that is rejected after the data step.
  const fs::path other = synthetic_text("other_words.txt", {"xyz", "zyx", "q"}, 3000);
  auto with_text = with_mirror("--text " + other.string() + " --out-dir " + out("cache_text"));
  REQUIRE(with_text.status == 0);
  CHECK_THAT(with_text.output, Catch::Contains("text_other_words_"));
  auto rejected =
      with_mirror("--text " + other.string() + " --eval-only --init-from " + checkpoint("cache_default").string());
  CHECK(rejected.status == 2);
  CHECK(nn::read_whole_file(cache / "meta.json") == meta);
  CHECK(nn::read_whole_file(cache / "train.bin") == train);
  auto again = with_mirror("--out-dir " + out("cache_default2"));
  REQUIRE(again.status == 0);
  CHECK_THAT(again.output, Catch::Contains("in " + cache.string() + ", prepared earlier from"));

  SECTION("a binary file: one line, and no folder left behind") {
    const fs::path binary = work_dir() / "binary.dat";
    {
      std::ofstream f(binary, std::ios::binary);
      for (int i = 0; i < 4096; ++i) f.put(static_cast<char>(i * 37 % 256));
    }
    const auto before = folders_in(data);
    usage_failure(with_mirror("--text " + binary.string() + " --out-dir " + out("cache_binary")),
                  "not a UTF-8 text file");
    CHECK(folders_in(data) == before);
  }
  SECTION("a broken prepared folder says how to rebuild it") {
    fs::resize_file(cache / "train.bin", 100);
    usage_failure(with_mirror("--out-dir " + out("cache_broken")), "is inconsistent (train.bin has 100 bytes");
    CHECK_THAT(with_mirror("--out-dir " + out("cache_broken")).output, Catch::Contains("delete the folder"));
    fs::remove_all(cache);  // as the message says: the next run prepares it anew
    CHECK(with_mirror("--out-dir " + out("cache_rebuilt")).status == 0);
    CHECK(nn::read_whole_file(cache / "meta.json") == meta);
  }
  SECTION("train.bin that is a folder") {
    fs::remove(cache / "train.bin");
    fs::create_directories(cache / "train.bin");
    usage_failure(with_mirror("--out-dir " + out("cache_dir")), "train.bin is missing or not a file");
    fs::remove_all(cache);
  }
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

TEST_CASE("bad values: exit status 2 and one readable line") {
  const std::string common = tiny(shakespeareish()) + " --out-dir " + out("badvalues");
  usage_failure(train_dp(2, common + " --max-iters -5"), "--max-iters must be a whole number ≥ 0, got -5");
  usage_failure(train_dp(2, common + " --max-iters abc"), "--max-iters must be a whole number ≥ 0, got abc");
  usage_failure(train_dp(2, common + " --crash-rank 1"), "--crash-rank 1 does nothing without --crash-at-step");
  // A value past the largest names the largest (it meets "≥ 0"), also past 64 bits.
  usage_failure(train_dp(2, common + " --max-iters 99999999999"),
                "--max-iters must be a whole number from 0 to 2147483647, got 99999999999");
  usage_failure(train_dp(2, common + " --max-iters 99999999999999999999999"),
                "--max-iters must be a whole number from 0 to 2147483647, got 99999999999999999999999");
  usage_failure(train_dp(2, common + " --batch-size 0"), "--batch-size must be a whole number ≥ 1, got 0");
  usage_failure(train_dp(2, common + " --learning-rate nan"), "--learning-rate must be a number > 0, got nan");
  usage_failure(train_dp(2, common + " --grad-clip inf"), "--grad-clip must be a number ≥ 0, got inf");
  // Past a float's range (the flags are floats): named as such, not a stray argument.
  usage_failure(train_dp(2, common + " --learning-rate 1e39"),
                "--learning-rate must be a number > 0 and ≤ 3.4028234663852886e+38, got 1e39");
  usage_failure(train_dp(2, common + " --timeout nan"), "--timeout must be a number > 0 and ≤ 1000000000, got nan");
  usage_failure(train_dp(2, common + " --dropout 2"), "--dropout must be a number ≥ 0 and ≤ 0.99, got 2");
  usage_failure(train_dp(2, common + " --sample-tokens 2000000000"),
                "--sample-tokens must be a whole number from 0 to");
  usage_failure(train_dp(2, common + " --crash-at-step 1 --crash-rank 7"), "--crash-rank 7 does not exist");
  usage_failure(run_command("env NANODIST_GEMM=fast " + mpirun(2, TRAIN_DP, common)),
                "NANODIST_GEMM=fast: expected eigen, openblas, onednn or auto");
  // The variables are named (a flag the user never typed would send them looking), the shm ones
  // included (one line and 2, not a line per rank and MPI_ABORT), and a switch takes 1 or 0.
  usage_failure(run_command("env NANODIST_BACKEND=bogus " + mpirun(2, TRAIN_DP, common)),
                "--backend: unknown backend 'bogus' (this build has mpi, ring, naive, shm");
  CHECK_THAT(run_command("env NANODIST_BACKEND=bogus " + mpirun(2, TRAIN_DP, common)).output,
             Catch::Contains("(from NANODIST_BACKEND=bogus)"));
  usage_failure(run_command("env NANODIST_SHM_SPIN=-1 " + mpirun(2, TRAIN_DP, common + " --backend shm")),
                "NANODIST_SHM_SPIN='-1' is not a count of polls");
  usage_failure(run_command("env NANODIST_SHM_RANKS_PER_NODE=0 " + mpirun(2, TRAIN_DP, common + " --backend shm")),
                "NANODIST_SHM_RANKS_PER_NODE='0' is not a number of ranks");
  usage_failure(run_command("env NANODIST_CHECK=2x " + mpirun(2, TRAIN_DP, common)),
                "NANODIST_CHECK='2x' is not a switch: use 1 or 0");
  usage_failure(run_command("env NANODIST_ALL_RANKS=-1 " + mpirun(2, TRAIN_DP, common)),
                "NANODIST_ALL_RANKS='-1' is not a switch");
  // Too big for memory: refused up front with the estimate, not std::bad_alloc or the OOM killer.
  for (const std::string flags : {" --batch-size 100000000", " --n-embd 1000000 --n-head 1", " --n-layer 100000"}) {
    auto r = train_dp(2, common + flags);
    usage_failure(r, "this configuration needs about");
    CHECK_THAT(r.output, !Catch::Contains("bad_alloc"));
  }
  SECTION("warnings for settings that work badly") {
    auto r = train_dp(2, common + " --max-iters 2 --warmup-iters 5 --threads 200 --eval-iters 1");
    CHECK(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("warning: --max-iters 2 ≤ --warmup-iters 5"));
    CHECK_THAT(r.output, Catch::Contains("warning: --threads 200 × 2 rank(s) on this node"));
    // The same settings in a run that is refused: its error line only, no warning before it.
    auto refused = train_dp(2, common + " --max-iters 2 --warmup-iters 5 --threads 200 --block-size 100000");
    CHECK(refused.status == 2);
    CHECK_THAT(refused.output, !Catch::Contains("warning"));
  }
}

TEST_CASE("every output location is checked before step 0") {
  const fs::path blocker = work_dir() / "a_file";
  std::ofstream(blocker) << "not a folder";
  auto r = train_dp(2, tiny(shakespeareish()) + " --max-iters 2 --out-dir " + (blocker / "out").string());
  usage_failure(r, "--out-dir " + (blocker / "out").string() + ": cannot write there");
  CHECK_THAT(r.output, !Catch::Contains("step 1/"));
  auto m = train_dp(2, tiny(shakespeareish()) + " --max-iters 2 --out-dir " + out("metrics_blocked") + " --metrics " +
                           (blocker / "m.csv").string());
  usage_failure(m, "--metrics");
  CHECK_THAT(m.output, !Catch::Contains("step 1/"));
  usage_failure(train_dp(2, tiny(shakespeareish()) + " --max-iters 2 --out-dir " + out("metrics_xml") + " --metrics " +
                                (work_dir() / "m.xml").string()),
                "m.xml: the file name must end in .csv or .jsonl");
  const std::string trace_under_file = (blocker / "t.json").string();
  auto t = train_dp(
      2, tiny(shakespeareish()) + " --max-iters 2 --out-dir " + out("trace_blocked") + " --trace " + trace_under_file);
  usage_failure(t, "--trace " + blocker.string() + ": cannot write there");
  CHECK_THAT(t.output, !Catch::Contains("step 1/"));
  usage_failure(train_dp(2, tiny(shakespeareish()) + " --max-iters 2 --out-dir " + out("trace_folder") + " --trace " +
                                work_dir().string()),
                "--trace " + work_dir().string() + ": is a folder, not a file");
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

TEST_CASE("the metrics file: a fresh run starts it afresh, a resume continues it from the resumed step") {
  const std::string common =
      tiny(shakespeareish()) + " --ckpt-interval 2 --lr-decay-iters 8 --out-dir " + out("metrics_resume");
  fs::remove_all(out("metrics_resume"));
  const fs::path csv = fs::path(out("metrics_resume")) / "metrics.csv";
  auto train_steps = [&] {
    std::vector<std::string> steps;
    for (const auto& line : lines_of(csv))
      if (line.starts_with("train,")) steps.push_back(line.substr(6, line.find(',', 6) - 6));
    return steps;
  };
  REQUIRE(train_dp(1, common + " --max-iters 4").status == 0);
  REQUIRE(train_dp(1, common + " --max-iters 4").status == 0);  // a second fresh run: no zig-zag
  CHECK(train_steps() == std::vector<std::string>{"1", "2", "3", "4"});
  REQUIRE(train_dp(1, common + " --max-iters 4 --resume").status == 0);  // 0 steps: no duplicates
  CHECK(train_steps() == std::vector<std::string>{"1", "2", "3", "4"});
  REQUIRE(train_dp(1, common + " --max-iters 6 --resume").status == 0);
  CHECK(train_steps() == std::vector<std::string>{"1", "2", "3", "4", "5", "6"});
  CHECK(lines_of(csv).front().starts_with("kind,step,"));
  int evals = 0;
  for (const auto& line : lines_of(csv)) evals += line.starts_with("eval,");
  CHECK(evals == 1);  // only the end of the run that finished (step 6); step 4's end-of-run evaluation is gone
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
  auto resumed = train_dp(2, data + " --resume --out-dir " + out("settings_resumed"));
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

namespace {
// A long run that logs every 20th step. After a Ctrl-C mpiexec reads none of the ranks' output
// until it ends them (about 2 s), and a rank that writes a line per 2-ms step fills its pipe
// and blocks there, killed before it can save (docs/trainers.md, "Stopping a run").
const std::string quiet_stop = " --max-iters 1000000 --log-interval 20";
}  // namespace

TEST_CASE("Ctrl-C: the ranks save the step they stop at, and one line says it and how to resume", "[alone]") {
  fs::remove_all(out("interrupted"));
  const fs::path log = work_dir() / "interrupted.log";
  const std::string command = mpirun(
      2, TRAIN_DP, tiny(shakespeareish()) + quiet_stop + " --ckpt-interval 50 --out-dir " + out("interrupted"));
  // Start the job, wait until its first checkpoint exists, then press Ctrl-C (SIGINT to mpiexec).
  const std::string script = fmt::format(
      "{} > {} 2>&1 & pid=$!; for i in $(seq 600); do [ -f {}/state.json ] && break; sleep 0.1; done; kill -INT $pid; "
      "wait $pid; echo exit=$?; cat {}",
      command, log.string(), checkpoint("interrupted").string(), log.string());
  auto r = run_command("bash -c '" + script + "'");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("SIGTERM: the job stops after this step and saves a checkpoint there"));
  // Not the last multiple of --ckpt-interval: the step it stopped at, saved there.
  const long stopped_at = interrupted_step(r.output);
  CHECK(stopped_at > 50);
  CHECK_THAT(r.output, Catch::Contains(fmt::format("the last checkpoint (step {})", stopped_at)));
  CHECK(nn::read_checkpoint_info(checkpoint("interrupted")).train_state.at("step") == stopped_at);
  // The launcher as it was run, its own flags too (mpirun() adds --oversubscribe), and the
  // flags typed that the checkpoint does not keep (how often to log, the deadline, …).
  CHECK_THAT(r.output, Catch::Contains("resume with: " + mpirun(2, TRAIN_DP, "--resume --out-dir")));
  const std::string resume_line = r.output.substr(r.output.find("resume with: "));
  CHECK_THAT(resume_line.substr(0, resume_line.find('\n')), Catch::Contains("--log-interval 20"));
  CHECK_THAT(r.output, !Catch::Contains("exit=0"));
  CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));
  // And the checkpoint it names resumes; a checkpoint.tmp that an interrupt left half-written
  // (made here by hand) is gone after it.
  const fs::path half_written = fs::path(out("interrupted")) / "checkpoint.tmp";
  fs::create_directories(half_written);
  std::ofstream(half_written / "model.safetensors") << "half";
  CHECK(train_dp(2, tiny(shakespeareish()) + " --resume --max-iters 9 --out-dir " + out("interrupted")).status == 0);
  CHECK_FALSE(fs::exists(half_written));
}

TEST_CASE("SIGTERM to one rank from outside the launcher: that rank is named, and all ranks stop together, saved",
          "[alone]") {
  fs::remove_all(out("one_rank_signalled"));
  const fs::path log = work_dir() / "one_rank_signalled.log";
  const std::string command =
      mpirun(2, TRAIN_DP,
             tiny(shakespeareish()) + quiet_stop + " --ckpt-interval 3 --out-dir " + out("one_rank_signalled"));
  // Rank 1 is the train_dp process whose environment says OMPI_COMM_WORLD_RANK=1.
  const std::string script = fmt::format(
      "{} > {} 2>&1 & pid=$!; for i in $(seq 600); do [ -f {}/state.json ] && break; sleep 0.1; done; "
      "for p in $(pgrep -f {}.*one_rank_signalled); do tr \"\\0\" \"\\n\" < /proc/$p/environ | "
      "grep -qx OMPI_COMM_WORLD_RANK=1 && kill -TERM $p; done; wait $pid; echo exit=$?; cat {}",
      command, log.string(), checkpoint("one_rank_signalled").string(), fs::path(TRAIN_DP).filename().string(),
      log.string());
  auto r = run_command("bash -c '" + script + "'");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("rank 1 received SIGTERM from process "));
  CHECK_THAT(r.output, Catch::Contains("not from the launcher: the job stops as asked"));
  // Rank 0 got no signal, yet it stops at the same step as rank 1 (the vote) and says so.
  const long stopped_at = interrupted_step(r.output);
  CHECK_THAT(r.output, Catch::Contains(fmt::format("the last checkpoint (step {})", stopped_at)));
  CHECK(nn::read_checkpoint_info(checkpoint("one_rank_signalled")).train_state.at("step") == stopped_at);
  CHECK_THAT(r.output, !Catch::Contains("rank 0 received"));
  CHECK_THAT(r.output, Catch::Contains("exit=143"));  // 128 + SIGTERM, from every rank
  CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));
}

namespace {
// A shell loop that sends `signal` to every rank of the run whose out dir is `name`: the
// train_dp processes with a rank number from Open MPI (not mpiexec, not this shell).
std::string signal_ranks(const std::string& name, const std::string& signal) {
  return fmt::format("for p in $(pgrep -f {}.*{}); do tr \"\\0\" \"\\n\" < /proc/$p/environ | "
                     "grep -q OMPI_COMM_WORLD_RANK= && kill -{} $p; done",
                     fs::path(TRAIN_DP).filename().string(), name, signal);
}
}  // namespace

TEST_CASE("SIGUSR1 (a scheduler's warning) to mpiexec: the ranks save the step they stop at and end with 0",
          "[alone]") {
  fs::remove_all(out("usr1"));
  const fs::path log = work_dir() / "usr1.log";
  const std::string command =
      mpirun(2, TRAIN_DP, tiny(shakespeareish()) + " --max-iters 1000000 --ckpt-interval 50 --out-dir " + out("usr1"));
  const std::string script = fmt::format(
      "{} > {} 2>&1 & pid=$!; for i in $(seq 600); do [ -f {}/state.json ] && break; sleep 0.1; done; "
      "kill -USR1 $pid; wait $pid; echo exit=$?; cat {}",
      command, log.string(), checkpoint("usr1").string(), log.string());
  auto r = run_command("bash -c '" + script + "'");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("SIGUSR1: the job stops after this step"));
  const long stopped_at = interrupted_step(r.output);
  CHECK(stopped_at > 50);
  CHECK_THAT(r.output, Catch::Contains(fmt::format("the last checkpoint (step {})", stopped_at)));
  CHECK(nn::read_checkpoint_info(checkpoint("usr1")).train_state.at("step") == stopped_at);
  CHECK_THAT(r.output, Catch::Contains("exit=0"));  // done as asked: the scheduler's script goes on
  CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));
}

TEST_CASE("A second interrupt leaves at once, without saving", "[alone]") {
  // Both signals must land before the step ends: the ranks are stopped (SIGSTOP), get SIGINT
  // and SIGTERM, and go on (SIGCONT) with both pending — delivered one after the other.
  fs::remove_all(out("twice"));
  const fs::path log = work_dir() / "twice.log";
  const std::string command = mpirun(
      2, TRAIN_DP, tiny(shakespeareish()) + " --max-iters 1000000 --ckpt-interval 1000000 --out-dir " + out("twice"));
  const std::string script = fmt::format(
      "{} > {} 2>&1 & pid=$!; for i in $(seq 600); do grep -q \"^step\" {} && break; sleep 0.1; done; "
      "{}; {}; {}; {}; wait $pid; echo exit=$?; cat {}",
      command, log.string(), log.string(), signal_ranks("twice", "STOP"), signal_ranks("twice", "INT"),
      signal_ranks("twice", "TERM"), signal_ranks("twice", "CONT"), log.string());
  auto r = run_command("bash -c '" + script + "'");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains(": the job stops after this step"));  // the first of the two
  CHECK_THAT(r.output, Catch::Contains("; no checkpoint was written yet"));   // the second: at once
  CHECK_FALSE(fs::exists(checkpoint("twice")));
  CHECK_THAT(r.output, !Catch::Contains("exit=0"));
  CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));
}

namespace {
std::string text_of(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Polls until `ready()` or `seconds` pass; whether it became ready.
template <class Ready>
bool wait_for(Ready ready, double seconds) {
  for (int i = 0; i < static_cast<int>(seconds * 10); ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return ready();
}
}  // namespace

TEST_CASE("one run per --out-dir: a second is refused naming the first, and kill -9 leaves no stale lock") {
  const std::string folder = out("shared");
  const fs::path lock = fs::path(folder) / ".lock", log = work_dir() / "first.log", group = work_dir() / "first.pgid";
  // The first run, in the background (its own session, whose id is written down), trains until
  // it is killed; whatever stops this case early, the guard ends that session's processes.
  const std::string first =
      mpirun(2, TRAIN_DP, tiny(shakespeareish()) + " --max-iters 1000000 --log-interval 1000 --out-dir " + folder);
  run_command(
      fmt::format("setsid bash -c 'echo $$ > {}; {} > {} 2>&1; echo exit=$? >> {}' < /dev/null > /dev/null 2>&1 &",
                  group.string(), first, log.string(), log.string()));
  struct EndFirstRun {
    fs::path group;
    ~EndFirstRun() {
      const std::string id = text_of(group);
      if (id.empty()) return;
      [[maybe_unused]] const int ended = std::system(fmt::format("pkill -9 -s {} 2>/dev/null", std::stoi(id)).c_str());
    }
  } end_first_run{group};
  REQUIRE(wait_for([&] { return fs::exists(lock) && fs::file_size(lock) > 0; }, 60));  // it holds the folder

  // A second run into the same folder: one line naming the first, exit 2, nothing of the first's touched.
  auto second = train_dp(2, tiny(shakespeareish()) + " --max-iters 2 --out-dir " + folder);
  usage_failure(second, fmt::format("--out-dir {} is in use by another run (train_dp, pid ", folder));
  CHECK_THAT(second.output, Catch::Contains(text_of(lock)));

  // kill -9 of the holder (rank 0, named in the lock file): the kernel drops the lock with it.
  const std::string holder = text_of(lock);
  const auto at = holder.find("pid ");
  REQUIRE(at != std::string::npos);
  REQUIRE(std::system(fmt::format("kill -9 {}", std::stoi(holder.substr(at + 4))).c_str()) == 0);
  CHECK(wait_for([&] { return text_of(log).find("exit=") != std::string::npos; }, 60));
  auto third = train_dp(2, tiny(shakespeareish()) + " --max-iters 2 --out-dir " + folder);
  CHECK(third.status == 0);
  CHECK_THAT(third.output, Catch::Contains("step 2/2"));
}

// The bound is check_within_bf16_rounding's (trainer_test_util.hpp): the ring rounds each
// rank's gradient and every partial sum, ≈ (N + 1)·2⁻⁸ of the gradient's size.
TEST_CASE("gradients as bf16 on the wire (--grad-comm bf16): half the bytes, and a run that ends near the fp32 one") {
  const std::string common = tiny(shakespeareish()) + fmt::format(" --batch-size 4 --max-iters {}", kSteps);
  const double one_step = 1e-3;  // --learning-rate: what AdamW moves a parameter per step
  REQUIRE(train_dp(3, common + " --out-dir " + out("fp32_n3")).status == 0);
  const std::vector<std::pair<std::string, std::string>> layouts = {{"naive", "--ddp naive"},
                                                                    {"bucketed", "--ddp bucketed --bucket-mb 0.01"},
                                                                    {"zero1", "--zero 1"},
                                                                    {"zero2", "--zero 2"},
                                                                    {"zero3", "--zero 3"}};
  for (const auto& [name, flags] : layouts) {
    auto r = train_dp(
        3, common + fmt::format(" {} --grad-comm bf16 --backend ring --out-dir {}", flags, out("bf16_" + name)));
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("gradients sent as bf16"));
    INFO(name);
    CHECK(check_within_bf16_rounding(checkpoint("bf16_" + name), checkpoint("fp32_n3"), kSteps, one_step) >
          1e-8);  // teeth: the gradients really went as bf16
  }
  SECTION("the bound has teeth: another seed (other data) ends farther away than bf16 rounding") {
    REQUIRE(train_dp(3, common + " --seed 7 --out-dir " + out("fp32_seed7")).status == 0);
    CHECK(mean_difference(checkpoint("fp32_seed7"), checkpoint("fp32_n3")) >= 0.05 * one_step);
  }
  SECTION("the step's traffic halves: counted and by the formula, replicated and ZeRO-2") {
    for (std::string zero : {"0", "2"}) {
      const std::string one_step_run = fmt::format(
          "--text {} --data-dir {} --max-iters 1 --eval-interval 0 --no-full-val --sample-tokens 0 --zero {}",
          shakespeareish().string(), (work_dir() / "data").string(), zero);
      auto fp32 = train_dp(2, one_step_run + " --out-dir " + out("traffic_fp32_" + zero));
      auto bf16 = train_dp(2, one_step_run + " --grad-comm bf16 --out-dir " + out("traffic_bf16_" + zero));
      REQUIRE((fp32.status == 0 && bf16.status == 0));
      const std::regex sent(R"(each rank sends ≈ ([0-9.]+) MB \(formula ([0-9.]+) MB)");
      std::smatch a, b;
      REQUIRE(std::regex_search(fp32.output, a, sent));
      REQUIRE(std::regex_search(bf16.output, b, sent));
      INFO("--zero " << zero << ": fp32 sends " << a[1] << " MB (formula " << a[2] << "), bf16 " << b[1]
                     << " MB (formula " << b[2] << ")");
      CHECK(std::stod(b[1]) == Approx(std::stod(b[2])).epsilon(0.07));  // counted = formula
      // Replicated: every byte is a gradient, so exactly half; ZeRO-2 all-gathers fp32
      // parameters too: Ψ·2 + Ψ·4 bytes of 2Ψ·4, three quarters.
      CHECK(std::stod(b[1]) == Approx(std::stod(a[1]) * (zero == "0" ? 0.5 : 0.75)).epsilon(0.07));
    }
  }
}

// --precision bf16: the linear layers' products on bf16 inputs. N ranks against one process
// then differ by more than fp32's last bits: a sum in another order can flip an activation's
// bf16 rounding. They must stay within bf16 rounding's bound (check_within_bf16_rounding),
// while the bf16 run itself differs from the fp32 one (the teeth); resume stays bit-exact.
TEST_CASE("bf16 matrix multiplies (--precision bf16): N ranks and ZeRO-3 end near one process, resume is bit-exact") {
  const std::string common = tiny(shakespeareish()) + fmt::format(" --sampling partition --max-iters {}", kSteps);
  const double one_step = 1e-3;
  REQUIRE(train_dp(1, common + " --batch-size 8 --out-dir " + out("prec_fp32_ref")).status == 0);
  auto ref = train_dp(1, common + " --batch-size 8 --precision bf16 --out-dir " + out("prec_bf16_ref"));
  REQUIRE(ref.status == 0);
  CHECK_THAT(ref.output, Catch::Contains("bf16 matrix multiplies on"));
  CHECK(mean_difference(checkpoint("prec_bf16_ref"), checkpoint("prec_fp32_ref")) > 1e-8);  // bf16 was used
  for (const auto& [name, flags] :
       std::vector<std::pair<std::string, std::string>>{{"prec_naive_ring", "--ddp naive --backend ring"},
                                                        {"prec_bucketed", "--ddp bucketed --bucket-mb 0.01"},
                                                        {"prec_zero3", "--zero 3"}}) {
    auto r = train_dp(2, common + fmt::format(" --batch-size 4 --precision bf16 {} --out-dir {}", flags, out(name)));
    REQUIRE(r.status == 0);
    // Nearer the bf16 process than the fp32 one: the ranks really multiplied in bf16.
    CHECK(check_within_bf16_rounding(checkpoint(name), checkpoint("prec_bf16_ref"), kSteps, one_step) <
          mean_difference(checkpoint(name), checkpoint("prec_fp32_ref")));
  }
  SECTION("without bf16 units (emulated: NANODIST_GEMM=eigen) the same products, summed in another order") {
    auto r =
        run_command("env NANODIST_GEMM=eigen " +
                    mpirun(1, TRAIN_DP, common + " --batch-size 8 --precision bf16 --out-dir " + out("prec_emulated")));
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("bf16 matrix multiplies on Eigen, emulated"));
    check_within_bf16_rounding(checkpoint("prec_emulated"), checkpoint("prec_bf16_ref"), kSteps, one_step);
  }
  SECTION("resume: 4 + 4 steps ≡ 8 steps bit for bit, and the checkpoint keeps bf16") {
    const std::string run = tiny(shakespeareish()) + " --dropout 0.1 --lr-decay-iters 8 --ckpt-interval 2";
    REQUIRE(train_dp(2, run + " --precision bf16 --max-iters 8 --out-dir " + out("prec_straight")).status == 0);
    REQUIRE(train_dp(2, run + " --precision bf16 --max-iters 4 --out-dir " + out("prec_resumed")).status == 0);
    auto r = train_dp(2, run + " --max-iters 8 --resume --out-dir " + out("prec_resumed"));  // no --precision
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("bf16 matrix multiplies on"));
    CHECK(same_bytes(checkpoint("prec_straight") / "model.safetensors",
                     checkpoint("prec_resumed") / "model.safetensors"));
    CHECK(same_bytes(checkpoint("prec_straight") / "optimizer.safetensors",
                     checkpoint("prec_resumed") / "optimizer.safetensors"));
  }
}
