// ProcessGroupNanodist: torch.distributed's collectives on nanodist's communicators.
//
// Each call checks its tensors at once (an unsupported op or type raises in Python, naming
// both), queues the call on the communication thread and returns a Work. The Work's future
// completes when the call is done (DDP waits on the future, not on wait()).
//
//   python:  import nanodist_torch; dist.init_process_group("nanodist", rank=r, world_size=n)
//   here:    allreduce([t], SUM) → thread: communicator.allreduce(span(t)) → work.complete()
//            isend([t], 1, tag)  → thread: communicator.isend(...) posted; a poll completes it
//
// Order (docs/pytorch.md, "Order"): the thread runs the queued calls one at a time, in the
// order issued, so a group's collectives run in the same order on every rank; sends and
// receives are only posted there and complete later, so a receive never holds up what is
// queued behind it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "comm/communicator.hpp"

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

// At the program's end: receives still posted that nobody waited for are withdrawn, not
// waited for (as gloo leaves them).
void withdraw_pending_receives();

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

class ProcessGroupNanodist : public c10d::ProcessGroup {
 public:
  ProcessGroupNanodist(int rank, int size, std::unique_ptr<comm::Communicator> communicator, int max_tag);
  ~ProcessGroupNanodist() override;

  const std::string getBackendName() const override { return "nanodist"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = {}) override;

 private:
  // A collective: body(communicator) runs on the communication thread, after every call
  // queued before it; the Work completes after it.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                         std::function<void(comm::Communicator&)> body);
  // A send or a receive: post(communicator) starts it on the communication thread and returns
  // its comm::Work; the thread's polls complete it (then finish(work, done) writes the result).
  using Post = std::function<comm::Work(comm::Communicator&)>;
  using Finish = std::function<void(NanodistWork&, const comm::Work&)>;
  c10::intrusive_ptr<c10d::Work> enqueue_message(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                                 Post post, Finish finish);
  // A receive from `source` (or kAnySource) into tensors[0]: done, written back and its sender named.
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int source, int tag, c10d::OpType type,
                                         const char* name);
  c10::intrusive_ptr<NanodistWork> make_work(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs);
  void check_tag(int tag, const char* call) const;

  std::shared_ptr<comm::Communicator> communicator_;
  std::shared_ptr<GroupCalls> calls_ = std::make_shared<GroupCalls>();
  std::string name_;  // the communicator's, for errors
  int max_tag_;
};

}  // namespace nanodist_torch
