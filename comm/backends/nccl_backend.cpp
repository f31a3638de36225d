// The nccl backend: NVIDIA's collective library on device memory, under the same watchdog as
// every other backend.
//
// One NCCL communicator per Communicator, made on its first call (so inside the watchdog's
// scope: a rank that never arrives is reported, not waited for): rank 0's ncclUniqueId is
// broadcast over MPI, then ncclCommInitRankConfig in non-blocking mode, polled until ready.
// Each has its own CUDA stream and a "done" event. A call enqueues the NCCL operation on the
// stream, records the event after it, and polls — never a blocking wait:
//
//   enqueue ─▶ ncclCommGetAsyncError = ncclInProgress? (a non-blocking comm may still be
//              enqueuing) ─▶ cudaEventRecord(done) ─▶ cudaEventQuery(done) = ready? ─▶ return
//
// If the deadline passes first (a peer never joined the collective: NCCL kernels spin
// forever waiting for it), the communicator is aborted with ncclCommAbort — never destroyed
// while stuck, which would hang too — and the watchdog prints the same report as for any
// backend: the operation, its sequence number, the missing ranks and what they were doing.
// The asynchronous forms (allreduce_async, reduce_scatter_async, allgather_async) stop after
// the enqueue: each gets its own event, and Work::test()/wait() poll that one — the same
// watched wait, later, so the caller's work overlaps NCCL's kernels.
//
// Check mode works as for the others: the argument fingerprint travels over MPI first.
//
// NCCL needs one GPU per rank (it refuses two ranks of one communicator on one device): the
// device is the node-local rank's (comm::select_device).
#include <nccl.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
#include <thread>

#include "comm/backends/registry.hpp"
#include "comm/device_memory.hpp"
#include "comm/error.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace comm {
namespace {

void check_cuda(cudaError_t code, const char* what) {
  if (code != cudaSuccess) fail("nccl backend: {} failed: {}", what, cudaGetErrorString(code));
}

// ncclInProgress is not a failure for a non-blocking communicator: the call goes on.
void check_nccl(ncclResult_t code, const char* what) {
  if (code != ncclSuccess && code != ncclInProgress)
    fail("nccl backend: {} failed: {}", what, ncclGetErrorString(code));
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::f32:
      return ncclFloat32;
    case DataType::f64:
      return ncclFloat64;
    case DataType::i32:
      return ncclInt32;
    case DataType::i64:
      return ncclInt64;
    case DataType::bf16:
      return ncclBfloat16;
    case DataType::u8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::prod:
      return ncclProd;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor:
      fail("nccl backend: NCCL has no bitwise reduction ({})", name_of(op));
  }
  return ncclSum;
}

// Testing the watchdog on a GPU: with NANODIST_NCCL_STALL set, the first collective's stream
// is blocked first by a host function that never returns, as a peer that never joins would.
void CUDART_CB stall_forever(void*) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

class NcclBackend;

// An NCCL call enqueued on the stream but not waited for (allreduce_async and friends): its
// own event, recorded right after it, says when it is done. Several may be in flight at once;
// the stream keeps them in the order they were started, as every rank starts them.
class NcclPendingOp final : public PendingOp {
 public:
  NcclPendingOp(std::shared_ptr<NcclBackend> backend, const char* what);
  ~NcclPendingOp() override;
  bool test() override;
  void wait() override;  // polls test() under the watchdog; past the deadline, ncclCommAbort

 private:
  std::shared_ptr<NcclBackend> backend_;  // keeps the communicator and stream alive
  const char* what_;
  cudaEvent_t done_ = nullptr;
};

class NcclBackend final : public Backend, public std::enable_shared_from_this<NcclBackend> {
 public:
  // The factory's: unattached, each Communicator attaches its own. `stall`: a test's stuck
  // GPU (NANODIST_NCCL_STALL), every collective's stream blocked forever.
  explicit NcclBackend(bool stall) : stall_(stall) {}
  ~NcclBackend() override {
    if (comm_) ncclCommDestroy(comm_);  // not stuck: a stuck one was aborted and forgotten
    if (done_) cudaEventDestroy(done_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "nccl"; }
  bool takes_device_memory() const override { return true; }
  bool per_communicator() const override { return true; }

  std::shared_ptr<Backend> attach(const Transport& t) override {
    auto attached = std::make_shared<NcclBackend>(stall_);
    attached->init(t);
    return attached;
  }

  void allreduce(const Transport&, const void* send, void* recv, std::size_t count, DataType type,
                 ReduceOp op) override {
    run("ncclAllReduce",
        [&] { return ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), comm_, stream_); });
  }
  void reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
              int root) override {
    run("ncclReduce", [&] {
      return ncclReduce(send, t.rank() == root ? recv : nullptr, count, nccl_type(type), nccl_op(op), root, comm_,
                        stream_);
    });
  }
  void broadcast(const Transport&, void* data, std::size_t count, DataType type, int root) override {
    run("ncclBroadcast", [&] { return ncclBroadcast(data, data, count, nccl_type(type), root, comm_, stream_); });
  }
  void allgather(const Transport&, const void* send, void* recv, std::size_t count, DataType type) override {
    run("ncclAllGather", [&] { return ncclAllGather(send, recv, count, nccl_type(type), comm_, stream_); });
  }
  void reduce_scatter(const Transport&, const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op) override {
    run("ncclReduceScatter",
        [&] { return ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), comm_, stream_); });
  }
  // NCCL has no gather or scatter: grouped sends and receives (the root's to itself included).
  void gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    const std::size_t block = count * size_of(type);
    run("gather (ncclSend/ncclRecv)", [&] {
      ncclGroupStart();
      if (t.rank() == root)
        for (int r = 0; r < t.size(); ++r)
          check_nccl(ncclRecv(static_cast<char*>(recv) + r * block, count, nccl_type(type), r, comm_, stream_),
                     "ncclRecv");
      check_nccl(ncclSend(send, count, nccl_type(type), root, comm_, stream_), "ncclSend");
      return ncclGroupEnd();
    });
  }
  void scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    const std::size_t block = count * size_of(type);
    run("scatter (ncclSend/ncclRecv)", [&] {
      ncclGroupStart();
      if (t.rank() == root)
        for (int r = 0; r < t.size(); ++r)
          check_nccl(ncclSend(static_cast<const char*>(send) + r * block, count, nccl_type(type), r, comm_, stream_),
                     "ncclSend");
      check_nccl(ncclRecv(recv, count, nccl_type(type), root, comm_, stream_), "ncclRecv");
      return ncclGroupEnd();
    });
  }
  // NCCL has no all-to-all either: every pair's blocks as grouped sends and receives.
  void alltoall(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) override {
    const std::size_t block = count * size_of(type);
    run("alltoall (ncclSend/ncclRecv)", [&] {
      ncclGroupStart();
      for (int r = 0; r < t.size(); ++r) {
        check_nccl(ncclSend(static_cast<const char*>(send) + r * block, count, nccl_type(type), r, comm_, stream_),
                   "ncclSend");
        check_nccl(ncclRecv(static_cast<char*>(recv) + r * block, count, nccl_type(type), r, comm_, stream_),
                   "ncclRecv");
      }
      return ncclGroupEnd();
    });
  }
  void alltoallv(const Transport& t, const void* send, Blocks send_blocks, void* recv, Blocks recv_blocks,
                 DataType type) override {
    run("alltoallv (ncclSend/ncclRecv)", [&] {
      ncclGroupStart();
      for (int r = 0; r < t.size(); ++r) {
        const auto i = static_cast<std::size_t>(r);
        check_nccl(ncclSend(at(send, send_blocks.displs[i], type), send_blocks.counts[i], nccl_type(type), r, comm_,
                            stream_),
                   "ncclSend");
        check_nccl(ncclRecv(at(recv, recv_blocks.displs[i], type), recv_blocks.counts[i], nccl_type(type), r, comm_,
                            stream_),
                   "ncclRecv");
      }
      return ncclGroupEnd();
    });
  }
  // Started, not waited for: the call is on the stream when these return, and the caller
  // overlaps its own work with it until PendingOp::test() or wait() says it is done.
  std::unique_ptr<PendingOp> start_allreduce(const Transport&, void* data, std::size_t count, DataType type,
                                             ReduceOp op) override {
    return start("ncclAllReduce (async)",
                 [&] { return ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), comm_, stream_); });
  }
  std::unique_ptr<PendingOp> start_reduce_scatter(const Transport&, void* send, void* recv, std::size_t count,
                                                  DataType type, ReduceOp op) override {
    return start("ncclReduceScatter (async)",
                 [&] { return ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), comm_, stream_); });
  }
  std::unique_ptr<PendingOp> start_allgather(const Transport&, const void* send, void* recv, std::size_t count,
                                             DataType type) override {
    return start("ncclAllGather (async)",
                 [&] { return ncclAllGather(send, recv, count, nccl_type(type), comm_, stream_); });
  }

  // A barrier is an allreduce of one number: it completes when every rank has joined.
  void barrier(const Transport&) override {
    run("barrier (ncclAllReduce)",
        [&] { return ncclAllReduce(scratch_->data(), scratch_->data(), 1, ncclInt32, ncclSum, comm_, stream_); });
  }
  void send(const Transport&, const void* data, std::size_t count, DataType type, int dest) override {
    run("ncclSend", [&] { return ncclSend(data, count, nccl_type(type), dest, comm_, stream_); });
  }
  void recv(const Transport&, void* data, std::size_t count, DataType type, int source) override {
    run("ncclRecv", [&] { return ncclRecv(data, count, nccl_type(type), source, comm_, stream_); });
  }
  void send_recv(const Transport&, const void* out, std::size_t out_count, int dest, void* in, std::size_t in_count,
                 int source, DataType type) override {
    run("ncclSend/ncclRecv", [&] {
      ncclGroupStart();
      check_nccl(ncclSend(out, out_count, nccl_type(type), dest, comm_, stream_), "ncclSend");
      check_nccl(ncclRecv(in, in_count, nccl_type(type), source, comm_, stream_), "ncclRecv");
      return ncclGroupEnd();
    });
  }

 private:
  void init(const Transport& t) {
    select_device(node_local_rank(), "--backend nccl (one GPU per rank)");
    ncclUniqueId id{};
    if (t.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Request shared;
    check_mpi(MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, t.mpi_comm(), &shared), "MPI_Ibcast");
    watchdog().wait_all(1, &shared);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // returns at once; ncclCommGetAsyncError says when it is ready
    check_nccl(ncclCommInitRankConfig(&comm_, t.size(), id, t.rank(), &config), "ncclCommInitRankConfig");
    wait_enqueued("ncclCommInitRankConfig");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    scratch_ = std::make_unique<DeviceBuffer>(sizeof(int32_t));
    if (stall_) check_cuda(cudaLaunchHostFunc(stream_, stall_forever, nullptr), "stall");
  }

  // Polls (watched) until the communicator has no call in progress; fails on an NCCL error.
  void wait_enqueued(const char* what) {
    watchdog().wait_until(
        [&] {
          ncclResult_t state = ncclSuccess;
          check_nccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
          if (state != ncclSuccess && state != ncclInProgress)
            fail("nccl backend: {}: {}", what, ncclGetErrorString(state));
          return state == ncclSuccess;
        },
        [&] { abort(); });
  }

  // Enqueue, wait until NCCL has enqueued it, record `done`, poll it; abort when the watchdog fires.
  template <class Enqueue>
  void run(const char* what, Enqueue&& enqueue) {
    check_nccl(enqueue(), what);
    wait_enqueued(what);
    check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
    wait_for_event(done_, what);
  }

  // The same up to the event, which then belongs to the pending operation.
  template <class Enqueue>
  std::unique_ptr<PendingOp> start(const char* what, Enqueue&& enqueue) {
    check_nccl(enqueue(), what);
    wait_enqueued(what);
    return std::make_unique<NcclPendingOp>(shared_from_this(), what);
  }

  // What NcclPendingOp polls with (a friend).
  cudaStream_t stream() const { return stream_; }

  // Has `event` happened? Not yet: false, unless NCCL reports a failure (a peer's shows here,
  // not on the event), which is an error.
  bool event_done(cudaEvent_t event, const char* what) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaErrorNotReady) {
      ncclResult_t async = ncclSuccess;
      if (comm_) ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        fail("nccl backend: {}: {}", what, ncclGetErrorString(async));
      return false;
    }
    check_cuda(state, what);
    return true;
  }

  void wait_for_event(cudaEvent_t event, const char* what) {
    watchdog().wait_until([&] { return event_done(event, what); }, [&] { abort(); });
  }

  // Stuck: abort (which unblocks NCCL's kernels) and never touch the communicator again.
  void abort() {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  friend class NcclPendingOp;
  bool stall_ = false;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  std::unique_ptr<DeviceBuffer> scratch_;
};

NcclPendingOp::NcclPendingOp(std::shared_ptr<NcclBackend> backend, const char* what)
    : backend_(std::move(backend)), what_(what) {
  check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(done_, backend_->stream()), "cudaEventRecord");
}

NcclPendingOp::~NcclPendingOp() {
  if (done_) cudaEventDestroy(done_);  // an event may be destroyed before it happens: CUDA frees it then
}

bool NcclPendingOp::test() { return backend_->event_done(done_, what_); }

void NcclPendingOp::wait() { backend_->wait_for_event(done_, what_); }

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(bool stall) { return std::make_unique<NcclBackend>(stall); }

}  // namespace comm
