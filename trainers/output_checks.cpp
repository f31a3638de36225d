#include "trainers/output_checks.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "comm/error.hpp"

namespace trainers {
namespace fs = std::filesystem;

// Every place the run will write must be writable before step 0, not at the first checkpoint.
void check_writable(const fs::path& dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path probe = dir / fmt::format(".write-test-{}", ::getpid());
  std::FILE* file = ec ? nullptr : std::fopen(probe.c_str(), "w");
  if (!file)
    throw comm::UsageError(
        fmt::format("{} {}: cannot write there ({})", flag, dir.string(), ec ? ec.message() : std::strerror(errno)));
  std::fclose(file);
  fs::remove(probe, ec);
}

void check_output_file(const fs::path& file, const std::string& flag) {
  if (fs::is_directory(file))
    throw comm::UsageError(fmt::format("{} {}: is a folder, not a file", flag, file.string()));
  check_writable(file.has_parent_path() ? file.parent_path() : fs::path("."), flag);
}

}  // namespace trainers
