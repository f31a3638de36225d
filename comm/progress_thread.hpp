// The communication thread: one per process, running every queued task in the order it was
// queued, as gloo's threads and NCCL's streams do. A collective started here returns at once;
// it runs on this thread while the caller goes on computing (a bucket's allreduce during
// backward). Two users:
//  - the library's own asynchronous collectives, with `--progress thread` (Communicator's
//    *_async: each is queued here and its Work ends when the thread has run it);
//  - the PyTorch backend (torch_backend/), which runs every call of a PyTorch program here.
//
//   ProgressThread& thread = ProgressThread::get();
//   thread.post([=] { communicator.allreduce(...); done->finish(); });   // returns at once
//   thread.run([&] { MPI_Init_thread(...); });                           // waits for it
//
// One thread for all communicators means their calls run in the order the program made them:
// two ranks that queue calls on two groups in opposite orders wait for each other, and the
// watchdog names them (docs/pytorch.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace comm {

class ProgressThread {
 public:
  static ProgressThread& get();

  // Queues `task`; it runs after every task queued before it. False once stopped.
  bool post(std::function<void()> task);
  // On the thread only: calls `poll` between tasks (and about every 50 µs when there are none)
  // until it returns true — an operation a task started that ends later (a send that waits
  // for its receiver, while the thread goes on to the next task).
  void keep_polling(std::function<bool()> poll);
  // On the thread only: runs the polls until every one is done (each watches its own deadline):
  // before MPI ends, nothing may be left in flight.
  void finish_polls();
  // Queues `task` and waits until it has run; rethrows what it threw.
  void run(const std::function<void()>& task);
  // Runs what is queued, then ends the thread (at exit). Later posts are dropped.
  void stop();
  bool running() const;
  // True on the communication thread itself (a future's callback runs there).
  bool on_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // The same, without starting the thread when there is none yet.
  static bool is_current();
  // Seconds the thread has spent running tasks (collectives, mostly): against the step time,
  // what communication costs; against the same run without overlap, how much of it was hidden.
  double busy_seconds() const;
  // When the task running now started (steady clock, ns), or 0 when none runs: a task that
  // runs for longer than any deadline holds the thread (a future's callback waiting for a call
  // queued behind it), which a monitor can see from another thread.
  std::int64_t task_started_ns() const { return task_started_ns_.load(); }

 private:
  ProgressThread();
  void loop();
  void run_polls();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::function<bool()>> polls_;  // the thread's own: no lock
  int idle_rounds_ = 0;                        // poll rounds with no task since the last task
  bool stopping_ = false;
  double busy_seconds_ = 0;
  std::atomic<std::int64_t> task_started_ns_{0};
  std::thread thread_;
};

// The end of one queued task, for whoever waits for it (a Work): it came, or it threw.
class Completion {
 public:
  // When the thread began running the task (steady clock, ns): a queued task may wait
  // behind others, so this, not the call's time, is when its communication started.
  void begin();
  void finish(std::exception_ptr error = nullptr);
  bool finished() const;
  // [began, finished] in steady-clock ns, once finished.
  std::pair<std::int64_t, std::int64_t> ran_ns() const;
  // Until finished; returns what the task threw (null: nothing).
  std::exception_ptr wait();

 private:
  mutable std::mutex mutex_;
  std::condition_variable finished_cv_;
  bool finished_ = false;
  std::exception_ptr error_;
  std::int64_t began_ns_ = 0, finished_ns_ = 0;
};

// How many tasks one owner (a communicator) has queued and not yet seen finish: before its next
// blocking call the owner waits for none, so its calls still run one at a time, in order.
class InFlight {
 public:
  void add();
  void remove();
  void wait_none();

 private:
  std::mutex mutex_;
  std::condition_variable none_cv_;
  int count_ = 0;
};

}  // namespace comm
