#include "nn/checkpoint_writer.hpp"

#include <sys/resource.h>

#include <cstdio>
#include <unistd.h>

namespace nn {

CheckpointWriter::CheckpointWriter(bool background, std::function<void()> before_swap)
    : background_(background), before_swap_(std::move(before_swap)) {
  if (!background_) return;
  thread_ = std::thread([this] { run(); });
}

CheckpointWriter::~CheckpointWriter() {
  if (!background_) return;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !pending_ && !writing_; });
    closing_ = true;
  }
  changed_.notify_all();
  thread_.join();
  if (failure_) {  // nobody asked since (an error elsewhere is ending the program): said, not lost
    try {
      std::rethrow_exception(failure_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: a checkpoint written in the background failed: %s\n", e.what());
    }
  }
}

void CheckpointWriter::save(const std::filesystem::path& dir, const GPT& model, const AdamW& optimizer,
                            const nlohmann::json& train_state) {
  if (!background_) {
    write_checkpoint(dir, snapshot_checkpoint(model, optimizer, train_state), before_swap_);
    return;
  }
  wait();  // one write at a time, and its failure is reported before anything new is taken
  CheckpointSnapshot snapshot = snapshot_checkpoint(model, optimizer, train_state);
  {
    const std::lock_guard lock(mutex_);
    pending_.emplace(dir, std::move(snapshot));
  }
  changed_.notify_all();
}

void CheckpointWriter::wait() {
  if (!background_) return;
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !pending_ && !writing_; });
  rethrow_failure();
}

void CheckpointWriter::rethrow_failure() {
  if (!failure_) return;
  std::exception_ptr failure = std::exchange(failure_, nullptr);
  std::rethrow_exception(failure);
}

void CheckpointWriter::run() {
  // The lowest priority (nice 19): where training keeps every core busy (this 2-core machine),
  // the write takes a small share of one, spread over the next steps, instead of half a core
  // from the step after the snapshot; where a core is idle (a GPU's host), it runs at once.
  // (SCHED_IDLE would starve here: ranks that wait for a collective spin.)
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return pending_ || closing_; });
    if (!pending_) return;  // closing, nothing left
    auto [dir, snapshot] = std::move(*pending_);
    pending_.reset();
    writing_ = true;
    lock.unlock();
    try {
      write_checkpoint(dir, snapshot, before_swap_);
    } catch (...) {
      lock.lock();
      failure_ = std::current_exception();
      lock.unlock();
    }
    lock.lock();
    writing_ = false;
    changed_.notify_all();
  }
}

}  // namespace nn
