#include "trainers/out_dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "comm/runtime.hpp"

namespace trainers {

OutDirLock::OutDirLock(const std::filesystem::path& out_dir, const std::string& holder) {
  const std::filesystem::path file = out_dir / ".lock";
  // O_CLOEXEC: a child (curl, for the data) must not inherit the lock and outlive the run with it.
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw comm::UsageError(
        fmt::format("--out-dir {}: cannot make its lock file ({})", out_dir.string(), std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    std::array<char, 256> text{};
    const ssize_t n = ::pread(fd_, text.data(), text.size() - 1, 0);
    const std::string other = n > 0 ? std::string(text.data(), static_cast<std::size_t>(n)) : "a run that gave no name";
    ::close(fd_);
    fd_ = -1;
    if (why == EWOULDBLOCK)
      throw comm::UsageError(
          fmt::format("--out-dir {} is in use by another run ({}): wait for it to end, or give "
                      "this run another --out-dir",
                      out_dir.string(), other));
    throw comm::UsageError(fmt::format("--out-dir {}: cannot lock it ({})", out_dir.string(), std::strerror(why)));
  }
  // Who holds it, for the run that will be refused.
  [[maybe_unused]] const int cut = ::ftruncate(fd_, 0);
  [[maybe_unused]] const ssize_t written = ::pwrite(fd_, holder.data(), holder.size(), 0);
}

OutDirLock::~OutDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the lock; the file stays, unlocked, for the next run
}

}  // namespace trainers
