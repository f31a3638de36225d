#include "comm/progress_thread.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <future>
#include <stdexcept>

namespace comm {

namespace {
std::atomic<ProgressThread*> g_started{nullptr};
}  // namespace

ProgressThread& ProgressThread::get() {
  // Never destroyed: Python may still drop a process group after the interpreter's atexit.
  static ProgressThread* thread = [] {
    auto* made = new ProgressThread();
    g_started = made;
    return made;
  }();
  return *thread;
}

bool ProgressThread::is_current() {
  const ProgressThread* thread = g_started.load();
  return thread && thread->on_thread();
}

ProgressThread::ProgressThread() : thread_([this] { loop(); }) {}

bool ProgressThread::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return true;
}

void ProgressThread::run(const std::function<void()>& task) {
  if (std::this_thread::get_id() == thread_.get_id()) return task();
  std::promise<void> done;
  std::future<void> result = done.get_future();
  const bool queued = post([&] {
    try {
      task();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  if (!queued) throw std::runtime_error("nanodist: the communication thread has ended (the program is exiting)");
  result.get();
}

void ProgressThread::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_one();
  if (on_thread()) return;  // a task asked: the loop ends after it, nobody to join
  if (thread_.joinable()) thread_.join();
}

double ProgressThread::busy_seconds() const {
  std::lock_guard lock(mutex_);
  return busy_seconds_;
}

bool ProgressThread::running() const {
  std::lock_guard lock(mutex_);
  return !stopping_;
}

void ProgressThread::keep_polling(std::function<bool()> poll) {
  if (!on_thread()) throw std::logic_error("ProgressThread::keep_polling called off the communication thread");
  polls_.push_back(std::move(poll));
}

void ProgressThread::run_polls() {
  std::vector<std::function<bool()>> polling = std::move(polls_);
  polls_.clear();
  for (auto& poll : polling) {
    bool done = true;  // a poll that throws is dropped: it had its chance to record the error
    try {
      done = poll();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nanodist: the communication thread caught: %s\n", e.what());
    }
    if (!done) polls_.push_back(std::move(poll));
  }
}

namespace {
// Between looks at unfinished polls: short enough that a message is moved within a fraction of
// its transfer time, long enough not to keep a core spinning; doubled while nothing changes, up
// to 2⁴ times (0.8 ms).
constexpr auto kPollPause = std::chrono::microseconds(50);
constexpr int kPollBackoffDoublings = 4;
}  // namespace

void ProgressThread::finish_polls() {
  while (!polls_.empty()) {
    run_polls();
    if (!polls_.empty()) std::this_thread::sleep_for(kPollPause);
  }
}

void ProgressThread::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      const auto ready = [&] { return !queue_.empty() || (stopping_ && polls_.empty()); };
      if (polls_.empty()) {
        wake_.wait(lock, ready);
      } else {
        // Polls waiting, no task: look again after a pause, backing off while nothing changes.
        wake_.wait_for(lock, kPollPause * (1 << std::min(idle_rounds_, kPollBackoffDoublings)), ready);
      }
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
      } else if (stopping_ && polls_.empty()) {
        return;  // stopping, and nothing left
      }
    }
    const auto start = std::chrono::steady_clock::now();
    task_started_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
    if (task) {
      idle_rounds_ = 0;
      try {
        task();  // tasks catch their own errors (a Work records them); this is the last net
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nanodist: the communication thread caught: %s\n", e.what());
      } catch (...) {
        std::fprintf(stderr, "nanodist: the communication thread caught an unknown exception\n");
      }
    } else {
      ++idle_rounds_;
    }
    run_polls();  // (a poll that completes a Work runs its future's callbacks)
    task_started_ns_ = 0;
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::lock_guard lock(mutex_);
    busy_seconds_ += took.count();
  }
}

namespace {
std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Completion::begin() {
  std::lock_guard lock(mutex_);
  began_ns_ = steady_ns();
}

std::pair<std::int64_t, std::int64_t> Completion::ran_ns() const {
  std::lock_guard lock(mutex_);
  return {began_ns_, finished_ns_};
}

void Completion::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    finished_ = true;
    finished_ns_ = steady_ns();
    if (began_ns_ == 0) began_ns_ = finished_ns_;
    error_ = std::move(error);
  }
  finished_cv_.notify_all();
}

bool Completion::finished() const {
  std::lock_guard lock(mutex_);
  return finished_;
}

std::exception_ptr Completion::wait() {
  std::unique_lock lock(mutex_);
  finished_cv_.wait(lock, [&] { return finished_; });
  return error_;
}

void InFlight::add() {
  std::lock_guard lock(mutex_);
  ++count_;
}

void InFlight::remove() {
  {
    std::lock_guard lock(mutex_);
    --count_;
  }
  none_cv_.notify_all();
}

void InFlight::wait_none() {
  std::unique_lock lock(mutex_);
  none_cv_.wait(lock, [&] { return count_ == 0; });
}

}  // namespace comm
