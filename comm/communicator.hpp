// A group of ranks and the collectives they can run together.
//
//   comm::Communicator& world = runtime.world();
//   std::vector<float> grad(n);
//   world.allreduce(std::span(grad), comm::ReduceOp::avg);   // every rank: the mean
//
// Every call goes to the backend chosen at run time (mpi, ring, naive, shm, nccl), under the
// watchdog: it has a sequence number on this communicator and a deadline, and in check
// mode its arguments are compared across ranks before any data moves. Each kind of
// collective travels on its own MPI communicator (a "lane"), so a rank that calls the wrong
// collective can never be matched with another's messages: it waits, and is reported.
//
// The asynchronous forms (*_async) make progress one of two ways (`--progress`, given to the
// world communicator when it is made; the communicators split from it inherit it):
//  - caller: the backend starts the operation and it moves when the caller tests or waits for
//    its Work (MPI requests, a ring step at a time; shm's complete when started);
//  - thread: the blocking collective is queued on the communication thread
//    (comm/progress_thread.hpp) and runs there while the caller computes. The communicator's
//    next blocking call first waits for what it has queued, so its calls still run one at a
//    time, in the order they were made, with the same results as the blocking forms.
// The point-to-point calls do not wait for the queued collectives (their own lane, MPI alone).
// Do not move a communicator while its Work is in flight (they point at it).
#pragma once

#include <mpi.h>

#include <array>
#include <functional>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/backend.hpp"
#include "comm/backends/registry.hpp"  // BackendSettings
#include "comm/error.hpp"
#include "comm/mpi_comm.hpp"
#include "comm/progress_thread.hpp"
#include "comm/staging.hpp"
#include "comm/traffic.hpp"
#include "comm/types.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace comm {

class Transport;

class Communicator;

// How asynchronous collectives make progress (see above).
enum class Progress : int { caller, thread };

// Handle of an asynchronous collective: the data must stay alive and untouched until wait().
class Work {
 public:
  Work() = default;
  Work(Work&&) = default;
  // Waits for the operation this handle held first: its buffers may still be in use.
  Work& operator=(Work&& other);
  ~Work();

  // Advances the operation without blocking; true once it is complete.
  bool test();
  // Blocks (under the watchdog, deadline counted from the start) until complete.
  void wait();
  bool done() const { return !op_ && !queued_; }
  // A receive (Communicator::irecv), once done: the rank whose message it took.
  int source() const { return source_; }
  // Withdraws a receive posted with irecv that has not matched a message (at a program's end,
  // one nobody waits for any more): true when it was, and the Work is then done.
  bool cancel();
  // The call as the watchdog names it, and when it started (for a caller that polls test()
  // against the deadline itself).
  const OpCall& call() const { return call_; }
  std::int64_t started_ns() const { return start_ns_; }
  // Once done: when the operation's communication ran, [start, end] in steady-clock ns — on the
  // communication thread, from when the thread took it up (it may have waited behind others)
  // to its end; otherwise from the call to when test() or wait() saw it complete. A --trace
  // draws a bucket's allreduce with it.
  std::pair<std::int64_t, std::int64_t> ran_ns() const { return ran_ns_; }

 private:
  friend class Communicator;
  void finish();
  std::unique_ptr<PendingOp> op_;
  std::shared_ptr<Completion> queued_;  // --progress thread: the communication thread runs it
  std::unique_ptr<Staging> staged_;  // device buffers' host copies (mpi, ring, naive)
  OpCall call_;
  std::int64_t start_ns_ = 0;
  std::pair<std::int64_t, std::int64_t> ran_ns_{0, 0};
  int source_ = -1;
};

// The displacements of blocks laid back to back: 0, c0, c0 + c1, …
std::vector<std::size_t> packed_displacements(std::span<const std::size_t> counts);

class Communicator {
 public:
  // Takes ownership of `group` (a fresh MPI communicator); collective over its ranks.
  // `settings`: what `backend` was made with, kept for the backends with_backend makes;
  // `progress`: how its asynchronous calls move (inherited by split and with_backend).
  Communicator(MPI_Comm group, std::string name, std::int64_t id, std::shared_ptr<Backend> backend,
               const BackendSettings& settings = {}, Progress progress = Progress::caller);
  Communicator(Communicator&&) = default;
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  std::string_view backend_name() const { return backend_->name(); }
  std::string backend_description() const { return backend_->describe(); }  // e.g. "shm: 2 ranks on one node, single copy …"

  // out-of-place: recv = send reduced over all ranks; in place: data reduced over all ranks.
  template <class T>
  void allreduce(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::sum);
  template <class T>
  void allreduce(std::span<T> data, ReduceOp op = ReduceOp::sum);
  // Only the root's recv is written (other ranks may pass an empty span).
  template <class T>
  void reduce(std::span<const T> send, std::span<T> recv, ReduceOp op, int root);
  template <class T>
  void reduce(std::span<T> data, ReduceOp op, int root);
  // The root's data is copied to every rank.
  template <class T>
  void broadcast(std::span<T> data, int root);
  // recv (size() × send.size()) gets every rank's send in rank order.
  template <class T>
  void allgather(std::span<const T> send, std::span<T> recv);
  // In place: this rank's block is already at rank() × (data.size() / size()).
  template <class T>
  void allgather(std::span<T> data);
  // The root's recv (size() × send.size()) gets every rank's send in rank order.
  template <class T>
  void gather(std::span<const T> send, std::span<T> recv, int root);
  // Rank r gets block r of the root's send (size() × recv.size()).
  template <class T>
  void scatter(std::span<const T> send, std::span<T> recv, int root);
  // send holds size() blocks of recv.size(); rank r gets block r reduced over all ranks.
  template <class T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::sum);
  void barrier();
  // All-to-all: send and recv hold size() blocks of send.size() / size() elements; block j of
  // send goes to rank j, and block i of recv comes from rank i (a transpose of the ranks'
  // blocks: Ulysses' sequence shard ↔ head shard, an expert layer's dispatch).
  template <class T>
  void alltoall(std::span<const T> send, std::span<T> recv);
  // The same with blocks of any size: block j of send is send_counts[j] elements at
  // send_displs[j], block i of recv is recv_counts[i] at recv_displs[i]. Rank i's
  // send_counts[j] must equal rank j's recv_counts[i] (check mode verifies it).
  template <class T>
  void alltoallv(std::span<const T> send, std::span<const std::size_t> send_counts,
                 std::span<const std::size_t> send_displs, std::span<T> recv, std::span<const std::size_t> recv_counts,
                 std::span<const std::size_t> recv_displs);
  // Blocks back to back in rank order (the displacements are the counts' running sums).
  template <class T>
  void alltoallv(std::span<const T> send, std::span<const std::size_t> send_counts, std::span<T> recv,
                 std::span<const std::size_t> recv_counts);

  template <class T>
  void send(std::span<const T> data, int dest);
  template <class T>
  void recv(std::span<T> data, int source);
  // Sends to `dest` and receives from `source` at once (a ring step): cannot deadlock.
  template <class T>
  void send_recv(std::span<const T> out, int dest, std::span<T> in, int source);
  // The same step while the caller works (ring attention's next block while this one computes):
  // every rank of the group calls it, in the same order, like a collective. With the
  // communication thread (--progress thread) that thread runs it; otherwise its two messages
  // are posted at once and move as the transport progresses them. Finish with Work::wait().
  template <class T>
  Work send_recv_async(std::span<const T> out, int dest, std::span<T> in, int source);

  // Point-to-point that never blocks (torch.distributed's isend and irecv): each returns at once
  // and its Work completes when the message has gone or come. A message goes to the receive
  // with its source and tag, in the order sent, as MPI and gloo match them; a receive from
  // kAnySource takes the first with its tag from anyone (Work::source() then names the
  // sender). These travel on a lane of their own: no collective's steps, nor send/recv above,
  // can ever take one of them, nor they one of those. Tags: 0 to max_tag(). CPU backends only.
  static constexpr int kAnySource = -1;
  template <class T>
  Work isend(std::span<const T> data, int dest, int tag);
  template <class T>
  Work irecv(std::span<T> data, int source, int tag);
  int max_tag() const;

  // Collectives that run while the caller works; finish each with Work::wait() (several may be
  // in flight, waited for in any order). In-place allreduce:
  template <class T>
  Work allreduce_async(std::span<T> data, ReduceOp op = ReduceOp::sum);
  // reduce_scatter as above, but `send` is work space: its contents are undefined afterwards
  // (the ring accumulates in it instead of in a copy).
  template <class T>
  Work reduce_scatter_async(std::span<T> send, std::span<T> recv, ReduceOp op = ReduceOp::sum);
  // allgather as above; in place when send is this rank's block of recv.
  template <class T>
  Work allgather_async(std::span<const T> send, std::span<T> recv);

  // True when this communicator's asynchronous collectives run on the communication thread.
  bool async_on_thread() const { return on_thread_; }

  // Calls and bytes so far on this communicator, by kind (each rank counts its own).
  const TrafficByKind& traffic() const { return traffic_; }

  // Ranks passing the same color (≥ 0) form a new communicator, ordered by key.
  Communicator split(int color, int key);
  // The same ranks, running another backend: to compare them. Made with this communicator's
  // backend settings (the environment's, read where the job started) and progress, or with these.
  Communicator with_backend(BackendKind backend);
  Communicator with_backend(BackendKind backend, const BackendSettings& settings, Progress progress);

 private:
  // The type-erased core every template above forwards to.
  void run_allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  void run_reduce(const void* send, void* recv, std::size_t count, std::size_t recv_size, DataType type, ReduceOp op,
                  int root);
  void run_broadcast(void* data, std::size_t count, DataType type, int root);
  void run_allgather(const void* send, void* recv, std::size_t count, std::size_t recv_size, DataType type);
  void run_gather(const void* send, void* recv, std::size_t count, std::size_t recv_size, DataType type, int root);
  void run_scatter(const void* send, std::size_t send_size, void* recv, std::size_t count, DataType type, int root);
  void run_reduce_scatter(const void* send, std::size_t send_size, void* recv, std::size_t count, DataType type,
                          ReduceOp op);
  void run_alltoall(const void* send, std::size_t send_size, void* recv, std::size_t recv_size, DataType type);
  void run_alltoallv(const void* send, std::size_t send_size, Blocks send_blocks, void* recv, std::size_t recv_size,
                     Blocks recv_blocks, DataType type);
  // check mode: rank i's send counts for j are rank j's receive counts from i, on every rank.
  void verify_alltoallv_counts(Blocks send_blocks, Blocks recv_blocks);
  void run_point_to_point(OpKind kind, void* data, std::size_t count, DataType type, int peer);
  Work run_tagged(OpKind kind, void* data, std::size_t count, DataType type, int peer, int tag);
  void run_send_recv(const void* out, std::size_t out_count, int dest, void* in, std::size_t in_count, int source,
                     DataType type);
  Work run_send_recv_async(const void* out, std::size_t out_count, int dest, void* in, std::size_t in_count,
                           int source, DataType type);
  Work run_allreduce_async(void* data, std::size_t count, DataType type, ReduceOp op);
  Work run_reduce_scatter_async(void* send, std::size_t send_size, void* recv, std::size_t count, DataType type,
                                ReduceOp op);
  Work run_allgather_async(const void* send, void* recv, std::size_t count, std::size_t recv_size, DataType type);
  // The next collective on this communicator, started by start(async transport) and handed back as Work.
  // `start` begins it on the caller's thread (caller progress); `run` is the blocking form,
  // queued on the communication thread (thread progress).
  template <class Start, class Run>
  Work start_async(OpKind kind, std::size_t count, DataType type, int op, int peer, Staging staged, Start&& start,
                   Run&& run);
  // Host copies of device buffers for a call of `kind` (or, for nccl, the check that they are on the device).
  Staging staging(OpKind kind) const;

  // A new communicator over the ranks of this one with the same color (split's core).
  Communicator derive(int color, int key, std::shared_ptr<Backend> backend, const BackendSettings& settings,
                      Progress progress);
  // Describes a call made on this communicator.
  OpCall begin(OpKind kind, std::size_t count, DataType type, int op, int root);
  // Runs body(transport, call) as the next collective on this communicator.
  using Body = std::function<void(const Transport&, const OpCall&)>;
  void collective(OpKind kind, std::size_t count, DataType type, int op, int root, const Body& body);
  // collective()'s two halves: number the call (the caller's thread, in program order), then
  // run it under the watchdog (there, or on the communication thread).
  OpCall next_collective(OpKind kind, std::size_t count, DataType type, int op, int root);
  void run_collective(const OpCall& call, const Body& body);
  // A call's staged buffers: what the backend reads and writes instead of the caller's.
  struct StagedCall {
    Staging staged;
    const void* in;
    void* out;
  };
  // allgather's checks and staging, the same for the blocking and the asynchronous form.
  StagedCall stage_allgather(const void* send, void* recv, std::size_t count, std::size_t recv_size, DataType type);
  // Waits until the collectives this communicator queued on the communication thread are done.
  void settle();
  [[noreturn]] void usage_error(OpKind kind, const std::string& what) const;
  void count_traffic(OpKind kind, std::size_t count, DataType type);
  void require_root(OpKind kind, int root) const;
  // A bitwise reduction of floating-point numbers is refused.
  void require_op(OpKind kind, DataType type, ReduceOp op) const;
  // A buffer of one block per rank: `what` ("recv", "the root's send") holds size × count elements.
  void require_blocks(OpKind kind, const char* what, std::size_t elements, std::size_t count) const;
  MPI_Comm lane(OpKind kind) const;

  // Each kind of call on its own MPI communicator, so no kind can take another's messages.
  static constexpr int kLanes = 15;
  static constexpr int kCheckLane = 0;  // lanes 1..8: one per collective kind (OpKind value)
  static constexpr int kPointToPointLane = 9;
  static constexpr int kAsyncLane = 10;
  static constexpr int kSplitLane = 11;
  static constexpr int kTaggedLane = 12;     // isend/irecv: the user's tags, matched by MPI
  static constexpr int kAlltoallLane = 13;
  static constexpr int kAlltoallvLane = 14;
  static constexpr int kAsyncTags = 32000;  // async collectives' tags (MPI guarantees up to 32767)
  std::shared_ptr<Backend> backend_;
  BackendSettings backend_settings_;
  Progress progress_;
  std::string name_;
  std::int64_t id_;
  int rank_ = 0;
  int size_ = 0;
  std::vector<int> members_;  // the world rank of each rank here (for the watchdog's reports)
  MpiComm group_;
  std::array<MpiComm, kLanes> lanes_;
  std::int64_t next_seq_ = 0;      // collectives, in the order every rank makes them
  std::int64_t next_p2p_seq_ = 0;  // sends and receives, counted per rank
  std::int64_t splits_ = 0;
  TrafficByKind traffic_{};
  bool on_thread_ = false;  // asynchronous collectives run on the communication thread
  std::shared_ptr<InFlight> in_flight_ = std::make_shared<InFlight>();  // queued there, not yet done
};

// ---- templates: check sizes, forward to the type-erased core ----

template <class T>
void Communicator::allreduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
  if (send.size() != recv.size())
    usage_error(OpKind::allreduce, fmt::format("send has {} elements, recv {}", send.size(), recv.size()));
  run_allreduce(send.data(), recv.data(), send.size(), datatype_of<T>(), op);
}
template <class T>
void Communicator::allreduce(std::span<T> data, ReduceOp op) {
  run_allreduce(data.data(), data.data(), data.size(), datatype_of<T>(), op);
}
template <class T>
void Communicator::reduce(std::span<const T> send, std::span<T> recv, ReduceOp op, int root) {
  run_reduce(send.data(), recv.data(), send.size(), recv.size(), datatype_of<T>(), op, root);
}
template <class T>
void Communicator::reduce(std::span<T> data, ReduceOp op, int root) {
  run_reduce(data.data(), data.data(), data.size(), data.size(), datatype_of<T>(), op, root);
}
template <class T>
void Communicator::broadcast(std::span<T> data, int root) {
  run_broadcast(data.data(), data.size(), datatype_of<T>(), root);
}
template <class T>
void Communicator::allgather(std::span<const T> send, std::span<T> recv) {
  run_allgather(send.data(), recv.data(), send.size(), recv.size(), datatype_of<T>());
}
template <class T>
void Communicator::allgather(std::span<T> data) {
  if (data.size() % static_cast<std::size_t>(size_) != 0)
    usage_error(OpKind::allgather,
                fmt::format("in-place buffer of {} elements is not {} equal blocks", data.size(), size_));
  const std::size_t count = data.size() / static_cast<std::size_t>(size_);
  run_allgather(data.data() + count * static_cast<std::size_t>(rank_), data.data(), count, data.size(),
                datatype_of<T>());
}
template <class T>
void Communicator::gather(std::span<const T> send, std::span<T> recv, int root) {
  run_gather(send.data(), recv.data(), send.size(), recv.size(), datatype_of<T>(), root);
}
template <class T>
void Communicator::scatter(std::span<const T> send, std::span<T> recv, int root) {
  run_scatter(send.data(), send.size(), recv.data(), recv.size(), datatype_of<T>(), root);
}
template <class T>
void Communicator::reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op) {
  run_reduce_scatter(send.data(), send.size(), recv.data(), recv.size(), datatype_of<T>(), op);
}
template <class T>
void Communicator::alltoall(std::span<const T> send, std::span<T> recv) {
  run_alltoall(send.data(), send.size(), recv.data(), recv.size(), datatype_of<T>());
}
template <class T>
void Communicator::alltoallv(std::span<const T> send, std::span<const std::size_t> send_counts,
                             std::span<const std::size_t> send_displs, std::span<T> recv,
                             std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs) {
  run_alltoallv(send.data(), send.size(), {send_counts, send_displs}, recv.data(), recv.size(),
                {recv_counts, recv_displs}, datatype_of<T>());
}
template <class T>
void Communicator::alltoallv(std::span<const T> send, std::span<const std::size_t> send_counts, std::span<T> recv,
                             std::span<const std::size_t> recv_counts) {
  const std::vector<std::size_t> send_displs = packed_displacements(send_counts);
  const std::vector<std::size_t> recv_displs = packed_displacements(recv_counts);
  alltoallv(send, send_counts, std::span<const std::size_t>(send_displs), recv, recv_counts,
            std::span<const std::size_t>(recv_displs));
}
template <class T>
void Communicator::send(std::span<const T> data, int dest) {
  run_point_to_point(OpKind::send, const_cast<T*>(data.data()), data.size(), datatype_of<T>(), dest);
}
template <class T>
void Communicator::recv(std::span<T> data, int source) {
  run_point_to_point(OpKind::recv, data.data(), data.size(), datatype_of<T>(), source);
}
template <class T>
void Communicator::send_recv(std::span<const T> out, int dest, std::span<T> in, int source) {
  run_send_recv(out.data(), out.size(), dest, in.data(), in.size(), source, datatype_of<T>());
}
template <class T>
Work Communicator::send_recv_async(std::span<const T> out, int dest, std::span<T> in, int source) {
  return run_send_recv_async(out.data(), out.size(), dest, in.data(), in.size(), source, datatype_of<T>());
}
template <class T>
Work Communicator::isend(std::span<const T> data, int dest, int tag) {
  return run_tagged(OpKind::send, const_cast<T*>(data.data()), data.size(), datatype_of<T>(), dest, tag);
}
template <class T>
Work Communicator::irecv(std::span<T> data, int source, int tag) {
  return run_tagged(OpKind::recv, data.data(), data.size(), datatype_of<T>(), source, tag);
}
template <class T>
Work Communicator::allreduce_async(std::span<T> data, ReduceOp op) {
  return run_allreduce_async(data.data(), data.size(), datatype_of<T>(), op);
}
template <class T>
Work Communicator::reduce_scatter_async(std::span<T> send, std::span<T> recv, ReduceOp op) {
  return run_reduce_scatter_async(send.data(), send.size(), recv.data(), recv.size(), datatype_of<T>(), op);
}
template <class T>
Work Communicator::allgather_async(std::span<const T> send, std::span<T> recv) {
  return run_allgather_async(send.data(), recv.data(), send.size(), recv.size(), datatype_of<T>());
}

}  // namespace comm
