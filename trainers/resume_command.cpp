#include "trainers/resume_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace trainers {
namespace fs = std::filesystem;

namespace {

// An argument as a shell reads it back: as it is when it is plain, else in single quotes.
std::string shell_quoted(const std::string& arg) {
  const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_./=:,@%+-").find(c) != std::string_view::npos;
  });
  if (plain) return arg;
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

std::string launcher_prefix(const std::string& program, const char* run_launcher) {
  // Under nanodist-run the command to type again is the launcher's (mpiexec's here is its own).
  if (run_launcher != nullptr && *run_launcher != '\0') return run_launcher;
  std::ifstream in(fmt::format("/proc/{}/cmdline", static_cast<long>(getppid())), std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  if (args.empty()) return "";
  const std::string launcher = fs::path(args[0]).filename().string();
  if (launcher != "mpiexec" && launcher != "mpirun" && launcher != "orterun") return "";
  // The launcher's own arguments end where the program begins: as typed, or by its name.
  const std::string name = fs::path(program).filename().string();
  for (std::size_t i = 1; i < args.size(); ++i)
    if (args[i] == program || fs::path(args[i]).filename().string() == name) {
      std::string prefix;
      for (std::size_t j = 0; j < i; ++j) {
        if (j > 0) prefix += ' ';
        prefix += shell_quoted(args[j]);
      }
      return prefix;
    }
  return "";
}

// The command that continues this run, for the interrupt note: the launcher as the user ran
// it (its flags too: --oversubscribe, --hostfile, -x), else a plain mpiexec.
std::string resume_command(const TrainOptions& o, int N) {
  const std::string launcher = o.launcher.empty() ? fmt::format("mpiexec -n {}", N) : o.launcher;
  std::string command = fmt::format("{} {} --resume", launcher, shell_quoted(o.program));
  if (o.explicit_flags.count("--out-dir")) command += " --out-dir " + shell_quoted(o.out_dir);
  if (o.explicit_flags.count("--data-dir")) command += " --data-dir " + shell_quoted(o.data_dir);
  if (!o.text.empty()) command += " --text " + shell_quoted(o.text);
  for (const std::string& word : relaunch_flags(o)) {
    command += ' ';
    command += shell_quoted(word);
  }
  return command;
}

}  // namespace trainers
