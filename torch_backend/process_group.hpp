// ProcessGroupNanodist: torch.distributed's collectives on nanodist's communicators. Its
// overrides are process_group.cpp, the queue on the communication thread call_queue.cpp, the
// Work and its future nanodist_work.hpp.
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
#include "torch_backend/nanodist_work.hpp"

namespace nanodist_torch {

// At the program's end: receives still posted that nobody waited for are withdrawn, not
// waited for (as gloo leaves them).
void withdraw_pending_receives();

class ProcessGroupNanodist : public c10d::ProcessGroup {
 public:
  // `overlap`: calls return before their collective is done (NANODIST_TORCH_OVERLAP, read by
  // the module's entry: 0 makes each call wait, as a blocking backend would).
  ProcessGroupNanodist(int rank, int size, std::unique_ptr<comm::Communicator> communicator, int max_tag,
                       bool overlap = true);
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
  bool overlap_;
};

}  // namespace nanodist_torch
