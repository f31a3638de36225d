#include "comm/watchdog/failure_save.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "comm/watchdog/exit_record.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace comm {
namespace {

// Held while the save runs too: replacing it (the program's loop ending) waits for a save in
// progress, which may use what the loop owns.
std::mutex g_mutex;
std::function<void()> g_save;
double g_deadline_s = 0;

}  // namespace

void set_failure_save(std::function<void()> save, double deadline_s) {
  const std::lock_guard lock(g_mutex);
  g_save = std::move(save);
  g_deadline_s = deadline_s;
}

void run_failure_save() {
  const std::lock_guard lock(g_mutex);
  const std::function<void()> save = std::exchange(g_save, nullptr);
  const double deadline_s = g_deadline_s;
  if (!save) return;
  // Past the deadline this process ends from a thread of its own, whatever the save is doing.
  std::thread([deadline_s] {
    std::this_thread::sleep_for(std::chrono::duration<double>(deadline_s));
    fmt::print(stderr, "[watchdog] the failure save did not finish within {:g} s; exiting without it\n", deadline_s);
    std::fflush(stderr);
    record_exit(kWatchdogExitCode);
    _exit(kWatchdogExitCode);
  }).detach();
  try {
    save();
  } catch (const std::exception& e) {
    fmt::print(stderr, "[watchdog] the failure save failed: {}\n", e.what());
  }
}

}  // namespace comm
