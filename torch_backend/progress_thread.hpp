// The communication thread: one per process, running every queued task in the order it was
// queued, as gloo's threads and NCCL's streams do. PyTorch's calls return at once with a Work;
// the collective itself runs here while Python goes on (DDP's buckets travel during backward).
//
//   ProgressThread& thread = ProgressThread::get();
//   thread.post([=] { communicator.allreduce(...); work->complete(); });   // returns at once
//   thread.run([&] { MPI_Init_thread(...); });                             // waits for it
//
// Every MPI call of the backend, MPI's start and end included, is made on this one thread, so
// MPI needs no more than MPI_THREAD_FUNNELED, and the watchdog's status board has one writer.
// One thread for all process groups means their calls run in the order the program made them:
// two ranks that call two groups in opposite orders wait for each other, and the watchdog names
// them (docs/pytorch.md).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace nanodist_torch {

class ProgressThread {
 public:
  static ProgressThread& get();

  // Queues `task`; it runs after every task queued before it. False once stopped.
  bool post(std::function<void()> task);
  // Queues `task` and waits until it has run; rethrows what it threw.
  void run(const std::function<void()>& task);
  // Runs what is queued, then ends the thread (at exit). Later posts are dropped.
  void stop();
  bool running() const;
  // True on the communication thread itself (a future's callback runs there).
  bool on_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // Seconds the thread has spent running tasks (collectives, mostly): against the step time,
  // what communication costs; against the same run without overlap, how much of it was hidden.
  double busy_seconds() const;

 private:
  ProgressThread();
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  double busy_seconds_ = 0;
  std::thread thread_;
};

}  // namespace nanodist_torch
