// train_dp's metrics file: a row per log line and per evaluation; a resume continues it.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
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
  {  // As a file of 0.6 left it, before the five routing columns: its rows stay, padded.
    std::vector<std::string> lines = lines_of(csv);
    std::ofstream older(csv);
    for (std::string line : lines) {
      for (int i = 0; i < 5; ++i) line = line.substr(0, line.rfind(','));
      older << line << "\n";
    }
  }
  REQUIRE(train_dp(1, common + " --max-iters 6 --resume").status == 0);
  CHECK(train_steps() == std::vector<std::string>{"1", "2", "3", "4", "5", "6"});
  const std::vector<std::string> rows = lines_of(csv);
  for (const auto& line : rows) CHECK(std::count(line.begin(), line.end(), ',') == std::count(rows[0].begin(), rows[0].end(), ','));
  CHECK(lines_of(csv).front().starts_with("kind,step,"));
  int evals = 0;
  for (const auto& line : lines_of(csv)) evals += line.starts_with("eval,");
  CHECK(evals == 1);  // only the end of the run that finished (step 6); step 4's end-of-run evaluation is gone
}
