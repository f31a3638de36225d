// A deadline for what no watchdog can watch: blocking MPI calls that wait for other processes
// (joining the job, making a group's communicator) and the program's exit. If the guarded
// work is still going when the deadline passes, the process says what did not finish, in
// one line, and ends with the watchdog's exit status — never a silent hang.
//
//   { Deadline guard(timeout_s, "rank 2: joining the job (rank 3 never connected?)"); MPI_Comm_accept(...); }
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace nanodist_torch {

class Deadline {
 public:
  Deadline(double seconds, std::string what);
  ~Deadline();  // the work finished in time: the guard goes
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread watcher_;
};

}  // namespace nanodist_torch
