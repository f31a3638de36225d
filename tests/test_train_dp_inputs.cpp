// train_dp refuses bad input in one line, before step 0: flags, values, output locations,
// a --text that fails to prepare.
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

  // (Catch2 runs the case once per section, and what stands outside them each time: only the
  // default preparation, which every section needs afresh, stands outside.)
  SECTION("another text, in a run that succeeds and in one rejected after the data step") {
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
  }
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
