// Point-to-point on comm::Communicator: blocking send and recv, send_recv (a ring step that
// cannot deadlock), and isend/irecv, which return at once and match by source and tag on a
// lane of their own. Sends and receives are counted per rank (next_p2p_seq_), not in the
// collectives' order.
#include "comm/communicator.hpp"

#include "comm/transport.hpp"

namespace comm {

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

}  // namespace comm
