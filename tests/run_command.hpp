// Runs a shell command for a test: its exit status, everything it printed, how long it took.
#pragma once

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

struct CommandResult {
  int status = -1;     // exit status, or 128 + signal
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> chunk{};
  while (std::fgets(chunk.data(), static_cast<int>(chunk.size()), pipe)) result.output += chunk.data();
  const int raw = pclose(pipe);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return result;
}

// "mpiexec --oversubscribe -n N program args" with the paths CMake passed in.
inline std::string mpirun(int ranks, const std::string& program, const std::string& args = "") {
  return std::string(NANODIST_MPIEXEC) + " --oversubscribe -n " + std::to_string(ranks) + " " + program + " " + args;
}
