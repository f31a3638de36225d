// The collectives of comm::Communicator: each checks its arguments, stages device buffers
// (comm/staging.hpp), and runs on its backend as the next numbered call under the watchdog —
// blocking (run_*), or started and handed back as Work (run_*_async), on the caller's thread
// or queued on the communication thread (--progress).
#include "comm/communicator.hpp"

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

void Communicator::barrier() {
  collective(OpKind::barrier, 0, DataType::i32, -1, -1,
             [&](const Transport& transport, const OpCall&) { backend_->barrier(transport); });
}

template <class Start, class Run>
Work Communicator::start_async(OpKind kind, std::size_t count, DataType type, int op, Staging staged, Start&& start,
                               Run&& run) {
  Work work;
  work.staged_ = std::make_unique<Staging>(std::move(staged));
  if (on_thread_ && !ProgressThread::is_current()) {
    // Numbered here, in program order; run on the communication thread, in that same order.
    OpCall call = next_collective(kind, count, type, op, -1);
    call.on_communication_thread = true;
    auto done = std::make_shared<Completion>();
    std::shared_ptr<InFlight> in_flight = in_flight_;
    in_flight->add();
    const bool queued = ProgressThread::get().post([this, call, run, done, in_flight] {
      done->begin();
      try {
        run_collective(call, [&](const Transport& t, const OpCall&) { run(t); });
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
  collective(kind, count, type, op, -1, [&](const Transport&, const OpCall& call) {
    // Async ops travel on their own lane, each with its own tag, so two in flight never swap messages.
    const Transport async(lanes_[kAsyncLane].get(), rank_, size_, static_cast<int>(call.seq % kAsyncTags));
    work.op_ = start(async);
    work.call_ = call;
    work.start_ns_ = now_ns();
  });
  return work;
}

Work Communicator::run_allreduce_async(void* data, std::size_t count, DataType type, ReduceOp op) {
  require_op(OpKind::allreduce, type, op);
  Staging staged = staging(OpKind::allreduce);
  void* buffer = staged.output(data, count * size_of(type), true, "data");
  Backend* const backend = backend_.get();  // the communicator keeps it alive until its work is done
  return start_async(
      OpKind::allreduce, count, type, static_cast<int>(op), std::move(staged),
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
      OpKind::reduce_scatter, count, type, static_cast<int>(op), std::move(staged),
      [&](const Transport& t) { return backend->start_reduce_scatter(t, work_space, out, count, type, op); },
      [=](const Transport& t) { backend->reduce_scatter(t, work_space, out, count, type, op); });
}

Work Communicator::run_allgather_async(const void* send, void* recv, std::size_t count, std::size_t recv_size,
                                       DataType type) {
  auto [staged, in, out] = stage_allgather(send, recv, count, recv_size, type);
  Backend* const backend = backend_.get();  // the communicator keeps it alive until its work is done
  return start_async(
      OpKind::allgather, count, type, -1, std::move(staged),
      [&](const Transport& t) { return backend->start_allgather(t, in, out, count, type); },
      [=](const Transport& t) { backend->allgather(t, in, out, count, type); });
}

}  // namespace comm
