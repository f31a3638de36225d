// What the train_dp cases (tests/test_train_dp_*.cpp, one program) share: the program run
// under mpiexec, the steps and tolerance its equivalences compare at, and small file helpers.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "run_command.hpp"
#include "trainer_test_util.hpp"

namespace fs = std::filesystem;

inline CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }

// Data-parallel runs are compared after kSteps optimizer steps. Float sums in another order
// differ in the last bits; the tolerance is far below one step's change (≈ lr = 1e-3).
inline constexpr int kSteps = 5;
inline constexpr float kTolerance = 2e-5f;

inline std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::vector<std::string> folders_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}
