// The handle of one torch.distributed call on nanodist (NanodistWork), and what the Works of a
// group share (GroupCalls): the order their futures complete in.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace nanodist_torch {

// What the Works of one group share: how many calls it has issued and run, and the futures
// given out late (see NanodistWork::getFuture).
class GroupCalls : public std::enable_shared_from_this<GroupCalls> {
 public:
  std::atomic<std::int64_t> issued{0};  // calls made so far (a call's index is its place here)
  // On the communication thread, after each call of the group has run (a send or receive:
  // been posted).
  void ran_one();
  // A future for `call` that completes once `call` is done and the group has run its first
  // `after` calls.
  c10::intrusive_ptr<c10::ivalue::Future> complete_after(const c10::intrusive_ptr<c10::ivalue::Future>& call,
                                                         std::int64_t after);

 private:
  struct Late {
    std::int64_t after;
    c10::intrusive_ptr<c10::ivalue::Future> call, given;
  };
  void release_ready();  // completes the late futures whose two conditions hold

  std::mutex mutex_;
  std::int64_t ran_ = 0;
  std::vector<Late> late_;
};

// One call's handle: complete() or fail() on the communication thread, wait() or the future
// from Python.
class NanodistWork : public c10d::Work {
 public:
  // `what` names the call in errors ("all_reduce #3 on 'default_pg'"); `index` is its place
  // among the group's calls.
  NanodistWork(c10d::OpType type, std::vector<at::Tensor> outputs, std::string what, std::int64_t index,
               std::shared_ptr<GroupCalls> group);
  void complete();
  void fail(std::exception_ptr error);
  // The rank a receive from any rank got its message from (before complete()).
  void set_source_rank(int rank) { source_rank_ = rank; }

  // Waits, never forever: it gives up with an error once the communication thread has been
  // held by one task (a callback) for the watchdog's deadline and a margin, or at `timeout`;
  // while the thread moves on (calls queued before this one, each under its own deadline), it
  // goes on waiting.
  // Refused at once on the communication thread for a call that has not run yet (it would run
  // after the waiting callback).
  bool wait(std::chrono::milliseconds timeout) override;
  // A future taken after the group has issued later calls completes only once those have run
  // too (and this call is done), so that a callback attached to it runs where the program
  // took it, after those calls, on every rank — not right after this call on a rank where it
  // happened to finish late (docs/pytorch.md, "Order"). It never blocks.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // When wait() was first called (0: never): a send or receive's deadline counts from there.
  std::int64_t first_waited_ns() const { return first_waited_ns_.load(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  int sourceRank() const override { return source_rank_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::string what_;
  std::int64_t index_;
  std::shared_ptr<GroupCalls> group_;
  int source_rank_ = -1;
  std::atomic<std::int64_t> first_waited_ns_{0};
};

}  // namespace nanodist_torch
