// Checkpoints that cost a step almost nothing: at a step boundary the writer takes a snapshot
// in memory (nn::snapshot_checkpoint: a copy of the weights and AdamW's moments), and a thread
// of its own writes it to disk while training goes on — atomically, as nn::save_checkpoint
// does, so a crash during the write leaves the previous checkpoint in use.
//
//   step 100 ─ snapshot ─ step 101 ─ step 102 ─ …         the training thread
//                 └──── write checkpoint.tmp, rename ──┘   the writer's thread
//
// The writer's thread runs at the lowest priority (nice 19). One write at a time: a snapshot taken while the previous one is still being written waits
// for it (so at most one snapshot is held in memory besides the model).
#pragma once
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "nn/checkpoint.hpp"

namespace nn {

class CheckpointWriter {
 public:
  // background = false: save() writes before it returns (the tests' and tools' way).
  // `before_swap`: passed to nn::write_checkpoint (a test's kill half-way through a write).
  explicit CheckpointWriter(bool background, std::function<void()> before_swap = {});
  ~CheckpointWriter();  // finishes the write in progress
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Snapshot now, write now or on the writer's thread. A failure of the previous background
  // write is thrown here (or by wait()).
  void save(const std::filesystem::path& dir, const GPT& model, const AdamW& optimizer,
            const nlohmann::json& train_state);
  // Returns once every snapshot taken is on disk.
  void wait();

 private:
  void run();  // the writer's thread
  void rethrow_failure();

  bool background_;
  std::function<void()> before_swap_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<std::pair<std::filesystem::path, CheckpointSnapshot>> pending_;  // taken, not yet written
  bool writing_ = false;
  bool closing_ = false;
  std::exception_ptr failure_;
  std::thread thread_;
};

}  // namespace nn
