// One run at a time per output folder. Two runs writing checkpoints into the same --out-dir
// destroy each other's work, so rank 0 of a training run holds a lock on <out-dir>/.lock from
// before step 0 to its exit. The kernel drops it when the process ends, however it ends
// (kill -9 too), so no stale lock is ever left behind: a second run is refused up front, in
// one line naming the run that holds the folder.
#pragma once

#include <filesystem>
#include <string>

namespace trainers {

class OutDirLock {
 public:
  // Takes the lock or throws comm::UsageError: "--out-dir D is in use by another run (…)".
  // `holder` describes this run for the one that is refused ("train_dp, pid 4242 on node1").
  OutDirLock(const std::filesystem::path& out_dir, const std::string& holder);
  ~OutDirLock();
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace trainers
