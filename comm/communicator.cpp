#include "comm/communicator.hpp"

#include <cstring>

#include "comm/backends/registry.hpp"
#include "comm/transport.hpp"
#include "numeric/hash.hpp"

namespace comm {
namespace {

constexpr int kCheckLane = 0;  // lanes 1..8: one per collective kind (OpKind value)
constexpr int kPointToPointLane = 9;
constexpr int kAsyncLane = 10;
constexpr int kSplitLane = 11;
constexpr int kTaggedLane = 12;  // isend/irecv: the user's tags, matched by MPI
constexpr int kAsyncTags = 32000;  // MPI guarantees tags up to 32767

// Mixes parent id, split number and color into the new communicator's id: equal on all its
// members, different from its siblings'.
std::int64_t derive_id(std::int64_t parent, std::int64_t split, int color) {
  const std::uint64_t x = numeric::hash_values(
      {static_cast<std::uint64_t>(parent), static_cast<std::uint64_t>(split), static_cast<std::uint64_t>(color)});
  return static_cast<std::int64_t>(x & 0x7FFFFFFFFFFFFFFFull) | 1;  // positive, never 0 (= empty slot)
}

}  // namespace

Communicator::Communicator(MPI_Comm group, std::string name, std::int64_t id, std::shared_ptr<Backend> backend,
                           const BackendSettings& settings)
    : backend_(std::move(backend)), backend_settings_(settings), name_(std::move(name)), id_(id), group_(group) {
  check_mpi(MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(group, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(group, &size_), "MPI_Comm_size");

  // Which world rank is each of our ranks (the status board is indexed by world rank).
  MPI_Group mine, world;
  MPI_Comm_group(group, &mine);
  MPI_Comm_group(job_world(), &world);
  std::vector<int> ours(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) ours[static_cast<std::size_t>(r)] = r;
  members_.resize(static_cast<std::size_t>(size_));
  MPI_Group_translate_ranks(mine, size_, ours.data(), world, members_.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);

  for (auto& lane : lanes_) {
    MPI_Comm copy;
    check_mpi(MPI_Comm_dup(group, &copy), "MPI_Comm_dup");
    lane = MpiComm(copy);
  }
  // A backend with state per communicator (nccl) makes it now, on all our ranks together,
  // watched like a collective (numbered as this communicator's first call, a "split").
  // nccl's asynchronous forms run on a CUDA stream already: they need no thread of ours.
  on_thread_ = progress() == Progress::thread && !backend_->takes_device_memory();
  if (backend_->per_communicator())
    collective(OpKind::split, 0, DataType::i32, -1, -1,
               [&](const Transport& t, const OpCall&) { backend_ = backend_->attach(t); });
}

Staging Communicator::staging(OpKind kind) const {
  return Staging(backend_->takes_device_memory(), [this, kind](const std::string& what) { usage_error(kind, what); });
}

Communicator::~Communicator() {
  settle();  // the communication thread may still be running a collective of ours
  // Its row in the status board's table of communicators can go to the next one.
  if (group_.get() != MPI_COMM_NULL && has_watchdog()) watchdog().forget(id_);
}

MPI_Comm Communicator::lane(OpKind kind) const {
  switch (kind) {
    case OpKind::send:
    case OpKind::recv:
    case OpKind::sendrecv:
      return lanes_[kPointToPointLane].get();
    case OpKind::split:
      return lanes_[kSplitLane].get();
    default:
      return lanes_[static_cast<std::size_t>(kind)].get();
  }
}

void Communicator::usage_error(OpKind kind, const std::string& what) const {
  fail("rank {}: {} on '{}': {}", rank_, name_of(kind), name_, what);
}

void Communicator::require_root(OpKind kind, int root) const {
  if (root < 0 || root >= size_)
    usage_error(kind, fmt::format("{} {} is not a rank of this {}-rank communicator",
                                  kind == OpKind::send || kind == OpKind::recv ? "peer" : "root", root, size_));
}

void Communicator::require_op(OpKind kind, DataType type, ReduceOp op) const {
  if (is_bitwise(op) && !is_integer(type))
    usage_error(kind, fmt::format("the bitwise reduction {} takes integers, not {}", name_of(op), name_of(type)));
}

void Communicator::require_blocks(OpKind kind, const char* what, std::size_t elements, std::size_t count) const {
  if (elements != count * static_cast<std::size_t>(size_))
    usage_error(kind, fmt::format("{} has {} elements, expected {} ranks × {}", what, elements, size_, count));
}

OpCall Communicator::begin(OpKind kind, std::size_t count, DataType type, int op, int root) {
  OpCall call;
  call.kind = kind;
  call.comm_id = id_;
  call.comm_name = name_;
  call.members = &members_;
  call.comm_rank = rank_;
  call.count = static_cast<std::int64_t>(count);
  call.type = type;
  call.op = op;
  call.root = root;
  call.on_communication_thread = ProgressThread::is_current();  // (the PyTorch backend's calls)
  return call;
}

// Every collective: number it, enter the watchdog's scope, check arguments, run the body.
template <class Body>
void Communicator::collective(OpKind kind, std::size_t count, DataType type, int op, int root, Body&& body) {
  settle();
  run_collective(next_collective(kind, count, type, op, root), std::forward<Body>(body));
}

OpCall Communicator::next_collective(OpKind kind, std::size_t count, DataType type, int op, int root) {
  OpCall call = begin(kind, count, type, op, root);
  call.seq = next_seq_++;
  count_traffic(kind, count, type);
  return call;
}

template <class Body>
void Communicator::run_collective(const OpCall& call, Body&& body) {
  OpScope scope(call);
  watchdog().count_entry(id_);
  if (watchdog().check_mode()) watchdog().verify_same_call(lanes_[kCheckLane].get());
  body(Transport(lane(call.kind), rank_, size_), call);
}

void Communicator::settle() {
  if (in_flight_ && !ProgressThread::is_current()) in_flight_->wait_none();
}

void Communicator::count_traffic(OpKind kind, std::size_t count, DataType type) {
  const bool per_rank =
      kind == OpKind::reduce_scatter || kind == OpKind::allgather || kind == OpKind::gather || kind == OpKind::scatter;
  Traffic& t = traffic_[static_cast<std::size_t>(kind)];
  ++t.calls;
  t.bytes += static_cast<double>(count * size_of(type)) * (per_rank ? size_ : 1);
}

double bytes_sent_per_rank(const TrafficByKind& traffic, int n) {
  const double part = n > 1 ? static_cast<double>(n - 1) / n : 0.0;
  double sent = 0;
  for (std::size_t k = 0; k < kOpKinds; ++k) {
    const double b = traffic[k].bytes;
    switch (static_cast<OpKind>(k)) {
      case OpKind::allreduce:
        sent += 2 * part * b;
        break;
      case OpKind::reduce_scatter:
      case OpKind::allgather:
      case OpKind::gather:
      case OpKind::scatter:
        sent += part * b;
        break;
      case OpKind::broadcast:
      case OpKind::reduce:
        sent += n > 1 ? b : 0;
        break;
      case OpKind::send:
      case OpKind::sendrecv:
        sent += b;
        break;
      default:
        break;
    }
  }
  return sent;
}

std::string describe(const TrafficByKind& traffic) {
  std::string text;
  for (std::size_t k = 0; k < kOpKinds; ++k) {
    if (traffic[k].calls == 0 || static_cast<OpKind>(k) == OpKind::split) continue;
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {} ({:.1f} MB)", traffic[k].calls, name_of(static_cast<OpKind>(k)), traffic[k].bytes / 1e6);
  }
  return text.empty() ? "nothing" : text;
}

TrafficByKind operator-(const TrafficByKind& later, const TrafficByKind& earlier) {
  TrafficByKind d{};
  for (std::size_t k = 0; k < kOpKinds; ++k)
    d[k] = {later[k].calls - earlier[k].calls, later[k].bytes - earlier[k].bytes};
  return d;
}

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

void Communicator::run_allgather(const void* send, void* recv, std::size_t count, std::size_t recv_size,
                                 DataType type) {
  require_blocks(OpKind::allgather, "recv", recv_size, count);
  const std::size_t bytes = count * size_of(type), all = bytes * static_cast<std::size_t>(size_);
  Staging staged = staging(OpKind::allgather);
  void* out = staged.output(recv, all, overlaps(send, bytes, recv, all), "recv");
  const void* in = staged.input(send, bytes, "send");
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

namespace {
Progress g_progress = Progress::caller;
}  // namespace

void set_progress(Progress p) { g_progress = p; }
Progress progress() { return g_progress; }

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
  require_blocks(OpKind::allgather, "recv", recv_size, count);
  const std::size_t bytes = count * size_of(type), all = bytes * static_cast<std::size_t>(size_);
  Staging staged = staging(OpKind::allgather);
  void* out = staged.output(recv, all, overlaps(send, bytes, recv, all), "recv");
  const void* in = staged.input(send, bytes, "send");
  Backend* const backend = backend_.get();  // the communicator keeps it alive until its work is done
  return start_async(
      OpKind::allgather, count, type, -1, std::move(staged),
      [&](const Transport& t) { return backend->start_allgather(t, in, out, count, type); },
      [=](const Transport& t) { backend->allgather(t, in, out, count, type); });
}

void Communicator::run_point_to_point(OpKind kind, void* data, std::size_t count, DataType type, int peer) {
  require_root(kind, peer);
  OpCall call = begin(kind, count, type, -1, peer);
  call.seq = next_p2p_seq_++;
  count_traffic(kind, count, type);
  const std::size_t bytes = count * size_of(type);
  Staging staged = staging(kind);
  void* buffer = kind == OpKind::send ? const_cast<void*>(staged.input(data, bytes, "data"))
                                      : staged.output(data, bytes, false, "data");
  {
    OpScope scope(call);
    const Transport transport(lane(kind), rank_, size_);
    if (kind == OpKind::send)
      backend_->send(transport, buffer, count, type, peer);
    else
      backend_->recv(transport, buffer, count, type, peer);
  }
  staged.finish();
}

namespace {
// A send posted and not yet received: one MPI request, which completes as MPI progresses.
class SendInFlight final : public PendingOp {
 public:
  explicit SendInFlight(MPI_Request request) : request_(request) {}
  bool test() override {
    int done = 0;
    check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }

 private:
  MPI_Request request_;
};
}  // namespace

Work Communicator::run_send_async(const void* data, std::size_t count, DataType type, int dest) {
  require_root(OpKind::send, dest);
  if (backend_->takes_device_memory())
    usage_error(OpKind::send, "send_async takes host memory (on nccl, use send)");
  Work work;
  work.call_ = begin(OpKind::send, count, type, -1, dest);
  work.call_.seq = next_p2p_seq_++;
  count_traffic(OpKind::send, count, type);
  // Every CPU backend's send is this one (Backend::send): the receiver's recv matches it.
  work.op_ = std::make_unique<SendInFlight>(Transport(lane(OpKind::send), rank_, size_).isend(data, count, type, dest));
  work.start_ns_ = now_ns();
  return work;
}

namespace {
// A tagged send or receive in flight (Communicator::isend/irecv): one MPI request. A receive
// checks, when done, that the message filled it exactly, and keeps its sender.
class MessageInFlight final : public PendingOp {
 public:
  MessageInFlight(MPI_Request request, const OpCall& call, int tag)
      : request_(request), call_(call), tag_(tag) {}
  bool test() override {
    if (completed_) return true;  // (its error, if any, was thrown once: the request is gone)
    int done = 0;
    MPI_Status status;
    const int code = MPI_Test(&request_, &done, &status);
    completed_ = done != 0 || code != MPI_SUCCESS;
    int error_class = MPI_SUCCESS;
    if (code != MPI_SUCCESS) MPI_Error_class(code, &error_class);
    if (error_class == MPI_ERR_TRUNCATE)
      fail("rank {}: recv #{} on '{}': a message with tag {} holds more than this receive's {} {} elements",
           call_.comm_rank, call_.seq, call_.comm_name, tag_, call_.count, name_of(call_.type));
    check_mpi(code, "MPI_Test");
    if (!done) return false;
    if (call_.kind == OpKind::recv) {
      source_ = status.MPI_SOURCE;
      int elements = 0;
      MPI_Get_count(&status, mpi_type(call_.type), &elements);
      if (elements != call_.count)
        fail("rank {}: recv #{} on '{}': rank {} sent {} {} elements with tag {}, this receive takes {}",
             call_.comm_rank, call_.seq, call_.comm_name, source_, elements, name_of(call_.type), tag_, call_.count);
    }
    return true;
  }
  int source() const override { return source_; }
  bool cancel() override {
    if (completed_ || call_.kind != OpKind::recv) return completed_;
    check_mpi(MPI_Cancel(&request_), "MPI_Cancel");
    check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");  // a cancelled receive completes at once
    completed_ = true;
    return true;
  }

 private:
  MPI_Request request_;
  OpCall call_;
  int tag_;
  int source_ = -1;
  bool completed_ = false;
};
}  // namespace

int Communicator::max_tag() const {
  int* upper = nullptr;
  int found = 0;
  // (MPI_TAG_UB is an attribute of MPI_COMM_WORLD alone: a communicator made from a group has none)
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &upper, &found);
  return found && upper ? *upper : 32767;  // (MPI promises at least 32767)
}

Work Communicator::run_tagged(OpKind kind, void* data, std::size_t count, DataType type, int peer, int tag) {
  if (!(kind == OpKind::recv && peer == kAnySource)) require_root(kind, peer);
  if (backend_->takes_device_memory())
    usage_error(kind, "isend and irecv take host memory (on nccl, use send and recv)");
  if (tag < 0 || tag > max_tag())
    usage_error(kind, fmt::format("tag {} is outside MPI's 0 to {}", tag, max_tag()));
  Work work;
  work.call_ = begin(kind, count, type, -1, peer);
  work.call_.seq = next_p2p_seq_++;
  count_traffic(kind, count, type);
  const Transport tagged(lanes_[kTaggedLane].get(), rank_, size_, tag);
  const MPI_Request request = kind == OpKind::send ? tagged.isend(data, count, type, peer)
                                                   : tagged.irecv(data, count, type, peer < 0 ? MPI_ANY_SOURCE : peer);
  work.op_ = std::make_unique<MessageInFlight>(request, work.call_, tag);
  work.start_ns_ = now_ns();
  return work;
}

int Communicator::run_recv_from_any(void* data, std::size_t count, DataType type) {
  if (backend_->takes_device_memory())
    usage_error(OpKind::recv, "a receive from any rank takes host memory (the nccl backend has none)");
  OpCall call = begin(OpKind::recv, count, type, -1, /*peer: any*/ -1);
  call.seq = next_p2p_seq_++;
  count_traffic(OpKind::recv, count, type);
  Staging staged = staging(OpKind::recv);
  void* buffer = staged.output(data, count * size_of(type), false, "data");
  int source = -1;
  {
    OpScope scope(call);
    // Every CPU backend sends over MPI on this lane with tag 0 (Backend::send). A matched probe
    // takes the first such message for this receive alone (no other receive can take it
    // between the probe and the receive), and names its sender.
    const MPI_Comm p2p = lane(OpKind::recv);
    MPI_Message message;
    MPI_Status status;
    watchdog().wait_until([&] {
      int found = 0;
      check_mpi(MPI_Improbe(MPI_ANY_SOURCE, 0, p2p, &found, &message, &status), "MPI_Improbe");
      return found != 0;
    });
    source = status.MPI_SOURCE;
    int elements = 0;
    MPI_Get_count(&status, mpi_type(type), &elements);
    if (elements == MPI_UNDEFINED || static_cast<std::size_t>(elements) != count) {
      // Taken all the same (a truncated receive: MPI_ERR_TRUNCATE, expected), so the next
      // receive does not get it by mistake.
      MPI_Mrecv(nullptr, 0, MPI_BYTE, &message, MPI_STATUS_IGNORE);
      usage_error(OpKind::recv, fmt::format("rank {} sent a message that is not {} {} elements (this receive from "
                                            "any rank's size)",
                                            source, count, name_of(type)));
    }
    MPI_Request request;
    check_mpi(MPI_Imrecv(buffer, elements, mpi_type(type), &message, &request), "MPI_Imrecv");
    watchdog().wait_all(1, &request);
  }
  staged.finish();
  return source;
}

void Communicator::run_send_recv(const void* out, std::size_t out_count, int dest, void* in, std::size_t in_count,
                                 int source, DataType type) {
  require_root(OpKind::send, dest);
  require_root(OpKind::recv, source);
  OpCall call = begin(OpKind::sendrecv, out_count, type, -1, source);
  call.seq = next_p2p_seq_++;
  count_traffic(OpKind::sendrecv, out_count, type);
  const std::size_t bytes = size_of(type);
  Staging staged = staging(OpKind::sendrecv);
  void* received = staged.output(in, in_count * bytes, false, "in");
  const void* sent = staged.input(out, out_count * bytes, "out");
  {
    OpScope scope(call);
    backend_->send_recv(Transport(lane(OpKind::sendrecv), rank_, size_), sent, out_count, dest, received, in_count,
                        source, type);
  }
  staged.finish();
}

Communicator Communicator::split(int color, int key) {
  if (color < 0) fail("rank {}: split on '{}': color {} is negative", rank_, name_, color);
  return derive(color, key, backend_, backend_settings_);
}

Communicator Communicator::with_backend(BackendKind backend) { return with_backend(backend, backend_settings_); }

Communicator Communicator::with_backend(BackendKind backend, const BackendSettings& settings) {
  // Color 0 for everyone: the same group, its own lanes, another backend.
  return derive(0, rank_, make_backend(backend, settings), settings);
}

Communicator Communicator::derive(int color, int key, std::shared_ptr<Backend> backend,
                                  const BackendSettings& settings) {
  // First make sure every rank is here (watched), so the blocking MPI calls below cannot hang.
  collective(OpKind::split, 0, DataType::i32, -1, -1, [](const Transport& t, const OpCall&) {
    MPI_Request arrived;
    check_mpi(MPI_Ibarrier(t.mpi_comm(), &arrived), "MPI_Ibarrier");
    watchdog().wait_all(1, &arrived);
  });
  MPI_Comm part;
  check_mpi(MPI_Comm_split(group_.get(), color, key, &part), "MPI_Comm_split");
  const std::int64_t number = splits_++;
  return Communicator(part, fmt::format("{}/split{}:{}", name_, number, color), derive_id(id_, number, color),
                      std::move(backend), settings);
}

Work::~Work() {
  if (done()) return;
  try {
    wait();
  } catch (const std::exception& e) {
    // A destructor cannot throw: say it and end the job, as Runtime::run does with an error.
    fmt::print(stderr, "error: {}\n", e.what());
    MPI_Abort(job_world(), 1);
  }
}

Work& Work::operator=(Work&& other) {
  if (this != &other) {
    if (!done()) wait();
    op_ = std::move(other.op_);
    queued_ = std::move(other.queued_);
    staged_ = std::move(other.staged_);
    call_ = other.call_;
    start_ns_ = other.start_ns_;
    source_ = other.source_;
  }
  return *this;
}

bool Work::test() {
  if (queued_ ? queued_->finished() : op_ && op_->test()) finish();
  return done();
}

void Work::wait() {
  if (op_ && !queued_) {
    OpScope scope(call_, start_ns_);
    op_->wait();
  }
  // A queued one: the communication thread runs it under the watchdog (its deadline, its
  // report); finish() waits for the thread to be done with it.
  if (!done()) finish();
}

bool Work::cancel() {
  if (!op_ || queued_ || !op_->cancel()) return done();
  op_.reset();
  return true;
}

void Work::finish() {
  const std::shared_ptr<Completion> queued = std::move(queued_);
  const std::exception_ptr error = queued ? queued->wait() : nullptr;
  if (op_) source_ = op_->source();
  op_.reset();
  if (staged_) staged_->finish();  // device buffers: the results back from their host copies
  staged_.reset();
  if (error) std::rethrow_exception(error);
}

}  // namespace comm
