// The communicator itself: its lanes, the numbering of its calls under the watchdog, and
// split. The calls are in communicator_collectives.cpp (blocking and asynchronous),
// communicator_point_to_point.cpp (send, recv, send_recv, isend, irecv), traffic.cpp (what
// went through it) and work.cpp (the handle of an asynchronous call).
#include "comm/communicator.hpp"

#include <cstring>
#include <utility>

#include "comm/backends/registry.hpp"
#include "comm/transport.hpp"
#include "numeric/hash.hpp"

namespace comm {
namespace {

// Mixes parent id, split number and color into the new communicator's id: equal on all its
// members, different from its siblings'.
std::int64_t derive_id(std::int64_t parent, std::int64_t split, int color) {
  const std::uint64_t x = numeric::hash_values(
      {static_cast<std::uint64_t>(parent), static_cast<std::uint64_t>(split), static_cast<std::uint64_t>(color)});
  return static_cast<std::int64_t>(x & 0x7FFFFFFFFFFFFFFFull) | 1;  // positive, never 0 (= empty slot)
}

}  // namespace

void Communicator::count_traffic(OpKind kind, std::size_t count, DataType type) {
  Traffic& t = traffic_[static_cast<std::size_t>(kind)];
  ++t.calls;
  t.bytes += call_bytes(kind, count, type, size_);
}

Communicator::Communicator(MPI_Comm group, std::string name, std::int64_t id, std::shared_ptr<Backend> backend,
                           const BackendSettings& settings, Progress progress)
    : backend_(std::move(backend)),
      backend_settings_(settings),
      progress_(progress),
      name_(std::move(name)),
      id_(id),
      group_(group) {
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
  on_thread_ = progress_ == Progress::thread && !backend_->takes_device_memory();
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
    case OpKind::alltoall:
      return lanes_[kAlltoallLane].get();
    case OpKind::alltoallv:
      return lanes_[kAlltoallvLane].get();
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
void Communicator::collective(OpKind kind, std::size_t count, DataType type, int op, int root, const Body& body) {
  settle();
  run_collective(next_collective(kind, count, type, op, root), body);
}

OpCall Communicator::next_collective(OpKind kind, std::size_t count, DataType type, int op, int root) {
  OpCall call = begin(kind, count, type, op, root);
  call.seq = next_seq_++;
  count_traffic(kind, count, type);
  return call;
}

void Communicator::run_collective(const OpCall& call, const Body& body) {
  OpScope scope(call);
  watchdog().count_entry(id_);
  if (watchdog().check_mode()) watchdog().verify_same_call(lanes_[kCheckLane].get());
  body(Transport(lane(call.kind), rank_, size_), call);
}

void Communicator::settle() {
  if (in_flight_ && !ProgressThread::is_current()) in_flight_->wait_none();
}

Communicator Communicator::split(int color, int key) {
  if (color < 0) fail("rank {}: split on '{}': color {} is negative", rank_, name_, color);
  return derive(color, key, backend_, backend_settings_, progress_);
}

Communicator Communicator::with_backend(BackendKind backend) {
  return with_backend(backend, backend_settings_, progress_);
}

Communicator Communicator::with_backend(BackendKind backend, const BackendSettings& settings, Progress progress) {
  // Color 0 for everyone: the same group, its own lanes, another backend.
  return derive(0, rank_, make_backend(backend, settings), settings, progress);
}

Communicator Communicator::derive(int color, int key, std::shared_ptr<Backend> backend,
                                  const BackendSettings& settings, Progress progress) {
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
                      std::move(backend), settings, progress);
}

}  // namespace comm
