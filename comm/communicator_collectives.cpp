// The collectives of comm::Communicator: each checks its arguments, stages device buffers
// (comm/staging.hpp), and runs on its backend as the next numbered call under the watchdog —
// blocking (run_*), or started and handed back as Work (run_*_async), on the caller's thread
// or queued on the communication thread (--progress).
#include "comm/communicator.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "comm/error.hpp"
#include "comm/transport.hpp"

namespace comm {

void Communicator::run_allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  require_op(OpKind::allreduce, type, op);
  const std::size_t bytes = count * size_of(type);
  // In place is the same buffer; half-overlapping ones would have the shm backend's peers write
  // results over inputs not yet read (and MPI forbids them too).
  if (send != recv && overlaps(send, bytes, recv, bytes))
    throw UsageError("allreduce: the send and receive buffers overlap without being the same buffer (in place "
                     "passes one buffer)");
  Staging staged = staging(OpKind::allreduce);
  void* out = staged.output(recv, bytes, overlaps(send, bytes, recv, bytes), "recv");
  const void* in = staged.input(send, bytes, "send");
  collective(OpKind::allreduce, count, type, static_cast<int>(op), -1, [&](const Transport& transport, const OpCall&) {
    backend_->allreduce(transport, in, out, count, type, op);
  });
  staged.finish();
}

void Communicator::run_reduce(const void* send, void* recv, std::size_t count, std::size_t recv_size, DataType type,
                              ReduceOp op, int root) {
  require_root(OpKind::reduce, root);
  require_op(OpKind::reduce, type, op);
  if (rank_ == root && recv_size != count)
    usage_error(OpKind::reduce, fmt::format("the root's recv has {} elements, send {}", recv_size, count));
  const std::size_t bytes = count * size_of(type);
  Staging staged = staging(OpKind::reduce);
  void* out = rank_ == root ? staged.output(recv, bytes, overlaps(send, bytes, recv, bytes), "recv") : recv;
  const void* in = staged.input(send, bytes, "send");
  collective(OpKind::reduce, count, type, static_cast<int>(op), root, [&](const Transport& transport, const OpCall&) {
    backend_->reduce(transport, in, out, count, type, op, root);
  });
  staged.finish();
}

void Communicator::run_broadcast(void* data, std::size_t count, DataType type, int root) {
  require_root(OpKind::broadcast, root);
  Staging staged = staging(OpKind::broadcast);
  void* buffer = staged.output(data, count * size_of(type), /*read_too=*/rank_ == root, "data");
  collective(OpKind::broadcast, count, type, -1, root, [&](const Transport& transport, const OpCall&) {
    backend_->broadcast(transport, buffer, count, type, root);
  });
  staged.finish();
}

Communicator::StagedCall Communicator::stage_allgather(const void* send, void* recv, std::size_t count,
                                                     std::size_t recv_size, DataType type) {
  require_blocks(OpKind::allgather, "recv", recv_size, count);
  const std::size_t bytes = count * size_of(type), all = bytes * static_cast<std::size_t>(size_);
  StagedCall call{staging(OpKind::allgather), nullptr, nullptr};
  call.out = call.staged.output(recv, all, overlaps(send, bytes, recv, all), "recv");
  call.in = call.staged.input(send, bytes, "send");
  return call;
}

void Communicator::run_allgather(const void* send, void* recv, std::size_t count, std::size_t recv_size,
                                 DataType type) {
  auto [staged, in, out] = stage_allgather(send, recv, count, recv_size, type);
  collective(OpKind::allgather, count, type, -1, -1, [&](const Transport& transport, const OpCall&) {
    backend_->allgather(transport, in, out, count, type);
  });
  staged.finish();
}

void Communicator::run_gather(const void* send, void* recv, std::size_t count, std::size_t recv_size, DataType type,
                              int root) {
  require_root(OpKind::gather, root);
  if (rank_ == root) require_blocks(OpKind::gather, "the root's recv", recv_size, count);
  const std::size_t bytes = count * size_of(type);
  Staging staged = staging(OpKind::gather);
  void* out = rank_ == root ? staged.output(recv, bytes * static_cast<std::size_t>(size_), false, "recv") : recv;
  const void* in = staged.input(send, bytes, "send");
  collective(OpKind::gather, count, type, -1, root, [&](const Transport& transport, const OpCall&) {
    backend_->gather(transport, in, out, count, type, root);
  });
  staged.finish();
}

void Communicator::run_scatter(const void* send, std::size_t send_size, void* recv, std::size_t count, DataType type,
                               int root) {
  require_root(OpKind::scatter, root);
  if (rank_ == root) require_blocks(OpKind::scatter, "the root's send", send_size, count);
  const std::size_t bytes = count * size_of(type);
  Staging staged = staging(OpKind::scatter);
  void* out = staged.output(recv, bytes, false, "recv");
  const void* in = rank_ == root ? staged.input(send, bytes * static_cast<std::size_t>(size_), "send") : send;
  collective(OpKind::scatter, count, type, -1, root, [&](const Transport& transport, const OpCall&) {
    backend_->scatter(transport, in, out, count, type, root);
  });
  staged.finish();
}

void Communicator::run_reduce_scatter(const void* send, std::size_t send_size, void* recv, std::size_t count,
                                      DataType type, ReduceOp op) {
  require_blocks(OpKind::reduce_scatter, "send", send_size, count);
  require_op(OpKind::reduce_scatter, type, op);
  const std::size_t bytes = count * size_of(type);
  Staging staged = staging(OpKind::reduce_scatter);
  void* out = staged.output(recv, bytes, false, "recv");
  const void* in = staged.input(send, bytes * static_cast<std::size_t>(size_), "send");
  collective(OpKind::reduce_scatter, count, type, static_cast<int>(op), -1,
             [&](const Transport& transport, const OpCall&) {
               backend_->reduce_scatter(transport, in, out, count, type, op);
             });
  staged.finish();
}

void Communicator::run_alltoall(const void* send, std::size_t send_size, void* recv, std::size_t recv_size,
                                DataType type) {
  const auto n = static_cast<std::size_t>(size_);
  if (send_size % n != 0)
    usage_error(OpKind::alltoall, fmt::format("send has {} elements, not {} equal blocks", send_size, size_));
  if (recv_size != send_size)
    usage_error(OpKind::alltoall, fmt::format("send has {} elements, recv {}", send_size, recv_size));
  const std::size_t count = send_size / n, bytes = send_size * size_of(type);
  if (overlaps(send, bytes, recv, bytes))
    usage_error(OpKind::alltoall, "the send and receive buffers overlap (an all-to-all has no in-place form here)");
  Staging staged = staging(OpKind::alltoall);
  void* out = staged.output(recv, bytes, false, "recv");
  const void* in = staged.input(send, bytes, "send");
  collective(OpKind::alltoall, count, type, -1, -1, [&](const Transport& transport, const OpCall&) {
    backend_->alltoall(transport, in, out, count, type);
  });
  staged.finish();
}

namespace {
// The last element a layout's blocks reach (the buffer must hold it), or a message on what is wrong.
std::string blocks_problem(Blocks blocks, std::size_t ranks, std::size_t buffer, const char* name) {
  if (blocks.counts.size() != ranks || blocks.displs.size() != ranks)
    return fmt::format("{} has {} counts and {} displacements, expected one per rank ({})", name, blocks.counts.size(),
                       blocks.displs.size(), ranks);
  for (std::size_t r = 0; r < ranks; ++r)
    if (blocks.displs[r] > buffer || blocks.counts[r] > buffer - blocks.displs[r])
      return fmt::format("{} block {} ({} elements at {}) runs past the buffer's {} elements", name, r,
                         blocks.counts[r], blocks.displs[r], buffer);
  return "";
}
}  // namespace

std::vector<std::size_t> packed_displacements(std::span<const std::size_t> counts) {
  std::vector<std::size_t> displs(counts.size());
  std::size_t at = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displs[r] = at;
    at += counts[r];
  }
  return displs;
}

void Communicator::run_alltoallv(const void* send, std::size_t send_size, Blocks send_blocks, void* recv,
                                 std::size_t recv_size, Blocks recv_blocks, DataType type) {
  const auto n = static_cast<std::size_t>(size_);
  for (const std::string& problem : {blocks_problem(send_blocks, n, send_size, "send"),
                                     blocks_problem(recv_blocks, n, recv_size, "recv")})
    if (!problem.empty()) usage_error(OpKind::alltoallv, problem);
  const auto me = static_cast<std::size_t>(rank_);
  if (send_blocks.counts[me] != recv_blocks.counts[me])  // the block a rank keeps: no peer needed to see it
    usage_error(OpKind::alltoallv, fmt::format("this rank sends itself {} elements but expects {}",
                                               send_blocks.counts[me], recv_blocks.counts[me]));
  const std::size_t es = size_of(type), send_bytes = send_size * es, recv_bytes = recv_size * es;
  if (overlaps(send, send_bytes, recv, recv_bytes))
    usage_error(OpKind::alltoallv, "the send and receive buffers overlap (an all-to-all has no in-place form here)");
  Staging staged = staging(OpKind::alltoallv);
  void* out = staged.output(recv, recv_bytes, /*read_too=*/true, "recv");  // places no block covers stay as they were
  const void* in = staged.input(send, send_bytes, "send");
  // The call is compared across ranks by kind and type (counts differ by rank: check mode
  // compares them pairwise instead); its traffic is this rank's whole send.
  collective(OpKind::alltoallv, 0, type, -1, -1, [&](const Transport& transport, const OpCall&) {
    if (watchdog().check_mode()) verify_alltoallv_counts(send_blocks, recv_blocks);
    backend_->alltoallv(transport, in, send_blocks, out, recv_blocks, type);
  });
  std::size_t sent = 0;
  for (std::size_t c : send_blocks.counts) sent += c;
  traffic_[static_cast<std::size_t>(OpKind::alltoallv)].bytes += static_cast<double>(sent * es);
  staged.finish();
}

void Communicator::verify_alltoallv_counts(Blocks send_blocks, Blocks recv_blocks) {
  // What every rank will send to this one: the send counts, transposed by an all-to-all.
  const std::vector<std::uint64_t> mine(send_blocks.counts.begin(), send_blocks.counts.end());
  std::vector<std::uint64_t> to_me(static_cast<std::size_t>(size_));
  MPI_Comm check = lanes_[kCheckLane].get();
  MPI_Request request;
  check_mpi(MPI_Ialltoall(mine.data(), 1, MPI_UINT64_T, to_me.data(), 1, MPI_UINT64_T, check, &request),
            "MPI_Ialltoall");
  watchdog().wait_all(1, &request);
  int wrong_from = -1;
  for (int r = 0; r < size_ && wrong_from < 0; ++r)
    if (to_me[static_cast<std::size_t>(r)] != recv_blocks.counts[static_cast<std::size_t>(r)]) wrong_from = r;
  // Every rank learns whether any pair disagreed, so all refuse the call together.
  int mine_wrong = wrong_from >= 0 ? 1 : 0, any_wrong = 0;
  check_mpi(MPI_Iallreduce(&mine_wrong, &any_wrong, 1, MPI_INT, MPI_MAX, check, &request), "MPI_Iallreduce");
  watchdog().wait_all(1, &request);
  if (wrong_from >= 0) {
    const auto r = static_cast<std::size_t>(wrong_from);
    usage_error(OpKind::alltoallv, fmt::format("rank {} sends {} elements to rank {}, which expects {} (check mode)",
                                               wrong_from, to_me[r], rank_, recv_blocks.counts[r]));
  }
  if (any_wrong != 0)
    usage_error(OpKind::alltoallv, "another rank's receive counts disagree with what is sent to it (check mode; its "
                                   "error names the pair)");
}

void Communicator::barrier() {
  collective(OpKind::barrier, 0, DataType::i32, -1, -1,
             [&](const Transport& transport, const OpCall&) { backend_->barrier(transport); });
}

template <class Start, class Run>
Work Communicator::start_async(OpKind kind, std::size_t count, DataType type, int op, int peer, Staging staged,
                               Start&& start,
                               Run&& run) {
  Work work;
  work.staged_ = std::make_unique<Staging>(std::move(staged));
  if (on_thread_ && !ProgressThread::is_current()) {
    // Numbered here, in program order; run on the communication thread, in that same order.
    OpCall call = next_collective(kind, count, type, op, peer);
    call.on_communication_thread = true;
    auto done = std::make_shared<Completion>();
    std::shared_ptr<InFlight> in_flight = in_flight_;
    in_flight->add();
    const bool queued = ProgressThread::get().post([this, call, run, done, in_flight] {
      done->begin();
      try {
        run_collective(call, [&](const Transport& t, const OpCall& c) {
          // A ring step keeps to the asynchronous lane and its own tag, as on the caller's
          // thread: no blocking send or recv of the program can take its messages.
          if (c.kind == OpKind::sendrecv)
            run(Transport(lanes_[kAsyncLane].get(), rank_, size_, static_cast<int>(c.seq % kAsyncTags)));
          else
            run(t);
        });
        done->finish();
      } catch (...) {
        done->finish(std::current_exception());
      }
      in_flight->remove();  // last: the communicator may be gone once it has seen this
    });
    if (!queued) {
      in_flight->remove();
      usage_error(kind, "the communication thread has ended (the program is exiting)");
    }
    work.queued_ = done;
    work.call_ = call;
    work.start_ns_ = now_ns();
    return work;
  }
  collective(kind, count, type, op, peer, [&](const Transport&, const OpCall& call) {
    // Async ops travel on their own lane, each with its own tag, so two in flight never swap messages.
    const Transport async(lanes_[kAsyncLane].get(), rank_, size_, static_cast<int>(call.seq % kAsyncTags));
    work.start_ns_ = now_ns();  // before: a backend's start may run the whole operation
    work.op_ = start(async);
    work.call_ = call;
  });
  return work;
}

Work Communicator::run_allreduce_async(void* data, std::size_t count, DataType type, ReduceOp op) {
  require_op(OpKind::allreduce, type, op);
  Staging staged = staging(OpKind::allreduce);
  void* buffer = staged.output(data, count * size_of(type), true, "data");
  Backend* const backend = backend_.get();  // the communicator keeps it alive until its work is done
  return start_async(
      OpKind::allreduce, count, type, static_cast<int>(op), -1, std::move(staged),
      [&](const Transport& t) { return backend->start_allreduce(t, buffer, count, type, op); },
      [=](const Transport& t) { backend->allreduce(t, buffer, buffer, count, type, op); });
}

Work Communicator::run_reduce_scatter_async(void* send, std::size_t send_size, void* recv, std::size_t count,
                                            DataType type, ReduceOp op) {
  require_blocks(OpKind::reduce_scatter, "send", send_size, count);
  require_op(OpKind::reduce_scatter, type, op);
  const std::size_t bytes = count * size_of(type);
  Staging staged = staging(OpKind::reduce_scatter);
  void* work_space = staged.output(send, bytes * static_cast<std::size_t>(size_), true, "send");
  void* out = staged.output(recv, bytes, false, "recv");
  Backend* const backend = backend_.get();  // the communicator keeps it alive until its work is done
  return start_async(
      OpKind::reduce_scatter, count, type, static_cast<int>(op), -1, std::move(staged),
      [&](const Transport& t) { return backend->start_reduce_scatter(t, work_space, out, count, type, op); },
      [=](const Transport& t) { backend->reduce_scatter(t, work_space, out, count, type, op); });
}

Work Communicator::run_allgather_async(const void* send, void* recv, std::size_t count, std::size_t recv_size,
                                       DataType type) {
  auto [staged, in, out] = stage_allgather(send, recv, count, recv_size, type);
  Backend* const backend = backend_.get();  // the communicator keeps it alive until its work is done
  return start_async(
      OpKind::allgather, count, type, -1, -1, std::move(staged),
      [&](const Transport& t) { return backend->start_allgather(t, in, out, count, type); },
      [=](const Transport& t) { backend->allgather(t, in, out, count, type); });
}

namespace {
// A ring step's two messages, posted at once; done when both are.
class ExchangeInFlight final : public PendingOp {
 public:
  ExchangeInFlight(MPI_Request sent, MPI_Request received) : requests_{sent, received} {}
  bool test() override {
    int done = 0;
    check_mpi(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    return done != 0;
  }

 private:
  MPI_Request requests_[2];
};
}  // namespace

Work Communicator::run_send_recv_async(const void* out, std::size_t out_count, int dest, void* in,
                                       std::size_t in_count, int source, DataType type) {
  require_root(OpKind::send, dest);
  require_root(OpKind::recv, source);
  if (backend_->takes_device_memory())
    usage_error(OpKind::sendrecv, "send_recv_async takes host memory (on nccl, use send_recv)");
  const std::size_t bytes = size_of(type);
  Staging staged = staging(OpKind::sendrecv);
  void* received = staged.output(in, in_count * bytes, false, "in");
  const void* sent = staged.input(out, out_count * bytes, "out");
  Backend* const backend = backend_.get();  // the communicator keeps it alive until its work is done
  return start_async(
      OpKind::sendrecv, out_count, type, -1, source, std::move(staged),
      [&](const Transport& t) -> std::unique_ptr<PendingOp> {
        return std::make_unique<ExchangeInFlight>(t.isend(sent, out_count, type, dest),
                                                  t.irecv(received, in_count, type, source));
      },
      [=](const Transport& t) { backend->send_recv(t, sent, out_count, dest, received, in_count, source, type); });
}

}  // namespace comm
