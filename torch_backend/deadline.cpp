#include "torch_backend/deadline.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "comm/watchdog/abort_hooks.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace nanodist_torch {

Deadline::Deadline(double seconds, std::string what) {
  // (a year at most: a std::chrono wait past that is no deadline anyway)
  const auto limit = std::chrono::duration<double>(std::min(seconds, 365.0 * 24 * 3600));
  watcher_ = std::thread([this, limit, seconds, what = std::move(what)] {
    std::unique_lock lock(mutex_);
    if (done_cv_.wait_for(lock, limit, [&] { return done_; })) return;
    const std::string line =
        fmt::format("[watchdog] {} did not finish within {:.1f} s; ending the job (exit status {})\n", what, seconds,
                    comm::kWatchdogExitCode);
    [[maybe_unused]] auto written = write(STDERR_FILENO, line.data(), line.size());
    comm::run_abort_hooks();  // (a shm segment must not outlive the job)
    _exit(comm::kWatchdogExitCode);
  });
}

Deadline::~Deadline() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  done_cv_.notify_one();
  watcher_.join();
}

}  // namespace nanodist_torch
