#include "comm/watchdog/exit_record.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace comm {
namespace {
std::atomic<int> g_record_fd{-1};
std::atomic<bool> g_exit_written{false};
}  // namespace

void open_exit_record(const char* dir, int world_rank) {
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = fmt::format("{}/rank{}", dir, world_rank);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    fmt::print(stderr, "warning: NANODIST_EXIT_RECORDS: cannot write {}: {}\n", path, std::strerror(errno));
    return;
  }
  char host[256] = "";
  ::gethostname(host, sizeof host - 1);
  const std::string line = fmt::format("started {} {}\n", host, ::getpid());
  [[maybe_unused]] auto written = ::write(fd, line.data(), line.size());
  g_record_fd.store(fd);
}

void record_exit(int status) {
  const int fd = g_record_fd.load();
  if (fd < 0 || g_exit_written.exchange(true)) return;  // once: the first way out is the one that counts
  char line[32] = "exit ";  // formatted by hand: no allocation in a signal handler
  int at = 5;
  unsigned value = static_cast<unsigned>(status < 0 ? -status : status);
  if (status < 0) line[at++] = '-';
  char digits[12];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0 && n < 11);
  while (n > 0) line[at++] = digits[--n];
  line[at++] = '\n';
  [[maybe_unused]] auto written = ::write(fd, line, static_cast<std::size_t>(at));
}

void record_finalized() {
  const int fd = g_record_fd.exchange(-1);
  if (fd < 0) return;
  constexpr char line[] = "finalized\n";
  [[maybe_unused]] auto written = ::write(fd, line, sizeof line - 1);
  ::close(fd);
}

}  // namespace comm
