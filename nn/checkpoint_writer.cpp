#include "nn/checkpoint_writer.hpp"

namespace nn {

CheckpointWriter::CheckpointWriter(bool background, std::function<void()> before_swap)
    : background_(background), before_swap_(std::move(before_swap)) {
  if (background_) thread_ = std::thread([this] { run(); });
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
