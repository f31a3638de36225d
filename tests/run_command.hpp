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
// orte_allowed_exit_without_sync: a rank's MPI_Finalize waits at most 2 s for mpiexec's
// acknowledgement (PMIx); under ctest -j4 on 2 cores mpiexec can be starved longer, then reports
// a rank that did finalize as "exited without calling finalize" and exits 1 (it failed
// demos/alltoall once in 243 tests). With it, mpiexec judges by exit status alone, and a test
// that must know reads the rank's own record (comm/watchdog/exit_record.hpp: "finalized").
inline std::string mpirun(int ranks, const std::string& program, const std::string& args = "") {
  return std::string(NANODIST_MPIEXEC) + " --oversubscribe --mca orte_allowed_exit_without_sync 1 -n " +
         std::to_string(ranks) + " " + program + " " + args;
}
