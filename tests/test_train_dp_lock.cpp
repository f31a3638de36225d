// One run per --out-dir: a second run is refused naming the first, and a killed run leaves
// no stale lock.
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
