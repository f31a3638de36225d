// Backend "mpi": MPI's own collectives — the reference every other backend is tested against.
//
// Each call uses MPI's nonblocking form (MPI_Iallreduce, ...) and waits through the
// watchdog, so a missing rank is reported instead of hanging. MPI has no average: it is a
// sum followed by a division on every rank.
#include <array>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "comm/backends/registry.hpp"
#include "comm/error.hpp"
#include "comm/reduce_kernels.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace comm {
namespace {

int to_int(std::size_t count) {
  if (count > static_cast<std::size_t>(INT32_MAX)) fail("{} elements exceed MPI's int count", count);
  return static_cast<int>(count);
}

void wait(MPI_Request& request) { watchdog().wait_all(1, &request); }

std::vector<int> ints(std::span<const std::size_t> values) {
  std::vector<int> out;
  out.reserve(values.size());
  for (std::size_t v : values) out.push_back(to_int(v));
  return out;
}

// MPI has no bfloat16: its buffers travel as 16-bit integers and are reduced by our own
// kernel, registered as an MPI_Op (one per operator: MPI tells the function nothing else).
// uint8 sums and products too: Open MPI 4.1's vectorised kernels (its op/avx component)
// saturate a uint8 sum at 255 instead of wrapping it (seen: 3 ranks, 1001 elements).
template <DataType Type, ReduceOp Op>
void reduce_ours(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, static_cast<std::size_t>(*len), Type, Op);
}

MPI_Op reduction(ReduceOp op, DataType type) {
  static const std::array<MPI_Op, 6> ops = [] {  // bf16: sum (avg: then divided), prod, min, max; uint8: sum, prod
    std::array<MPI_Op, 6> made{};
    MPI_Op_create(&reduce_ours<DataType::bf16, ReduceOp::sum>, 1, &made[0]);
    MPI_Op_create(&reduce_ours<DataType::bf16, ReduceOp::prod>, 1, &made[1]);
    MPI_Op_create(&reduce_ours<DataType::bf16, ReduceOp::min>, 1, &made[2]);
    MPI_Op_create(&reduce_ours<DataType::bf16, ReduceOp::max>, 1, &made[3]);
    MPI_Op_create(&reduce_ours<DataType::u8, ReduceOp::sum>, 1, &made[4]);
    MPI_Op_create(&reduce_ours<DataType::u8, ReduceOp::prod>, 1, &made[5]);
    return made;
  }();
  const bool sum = op == ReduceOp::sum || op == ReduceOp::avg;
  if (type == DataType::u8 && (sum || op == ReduceOp::prod)) return ops[sum ? 4 : 5];
  if (type != DataType::bf16) return mpi_op(op);
  switch (op) {
    case ReduceOp::prod:
      return ops[1];
    case ReduceOp::min:
      return ops[2];
    case ReduceOp::max:
      return ops[3];
    default:
      return ops[0];
  }
}

// OpenMPI 4.1's MPI_Iallreduce and MPI_Ireduce are slower in place (MPI_IN_PLACE) than out of
// place: allreduce 0.38× at 64 MiB on 2 ranks here, reduce about 0.5× (docs/benchmarks.md,
// "In place and out of place"). From this size up, both copy their input into a buffer the
// backend keeps and run out of place. (Not allreduce_async: a copy per call pays for fresh
// pages each time, and made train_dp's bucketed step slower when tried.)
constexpr std::size_t kCopyInPlaceFrom = 64 << 10;

// An MPI nonblocking collective in flight, as a PendingOp. The average (MPI has none) is
// divided into `result` once it is complete.
class MpiPending : public PendingOp {
 public:
  MpiPending(void* result, std::size_t count, DataType type, ReduceOp op, int size)
      : result_(result), count_(count), type_(type), op_(op), size_(size), requests_(1) {}
  MPI_Request* request() { return requests_.data(); }
  bool test() override {
    int done = 0;
    MPI_Status status;
    watchdog().check_completion(MPI_Test(requests_.data(), &done, &status), 1, &status, "MPI_Test");
    if (done && !finished_) {
      finish_average(result_, count_, type_, op_, size_);
      finished_ = true;
    }
    return done != 0;
  }

 private:
  void* result_;
  std::size_t count_;
  DataType type_;
  ReduceOp op_;
  int size_;
  bool finished_ = false;
  std::vector<MPI_Request> requests_;
};

class MpiBackend : public Backend {
 public:
  std::string_view name() const override { return "mpi"; }

  void allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                 ReduceOp op) override {
    if (send == recv) send = input_copy(recv, count * size_of(type));
    MPI_Request request;
    check_mpi(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, to_int(count), mpi_type(type),
                             reduction(op, type), t.mpi_comm(), &request),
              "MPI_Iallreduce");
    wait(request);
    finish_average(recv, count, type, op, t.size());
  }

  void reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
              int root) override {
    if (t.rank() == root && send == recv) send = input_copy(recv, count * size_of(type));
    const bool in_place = t.rank() == root && send == recv;
    MPI_Request request;
    check_mpi(MPI_Ireduce(in_place ? MPI_IN_PLACE : send, recv, to_int(count), mpi_type(type), reduction(op, type),
                          root, t.mpi_comm(), &request),
              "MPI_Ireduce");
    wait(request);
    if (t.rank() == root) finish_average(recv, count, type, op, t.size());
  }

  void broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root) override {
    MPI_Request request;
    check_mpi(MPI_Ibcast(data, to_int(count), mpi_type(type), root, t.mpi_comm(), &request), "MPI_Ibcast");
    wait(request);
  }

  void allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) override {
    const bool in_place = send == static_cast<const char*>(recv) + t.rank() * count * size_of(type);
    MPI_Request request;
    check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, to_int(count), mpi_type(type), recv, to_int(count),
                             mpi_type(type), t.mpi_comm(), &request),
              "MPI_Iallgather");
    wait(request);
  }

  void gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    MPI_Request request;
    check_mpi(MPI_Igather(send, to_int(count), mpi_type(type), recv, to_int(count), mpi_type(type), root, t.mpi_comm(),
                          &request),
              "MPI_Igather");
    wait(request);
  }

  void scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    MPI_Request request;
    check_mpi(MPI_Iscatter(send, to_int(count), mpi_type(type), recv, to_int(count), mpi_type(type), root, t.mpi_comm(),
                           &request),
              "MPI_Iscatter");
    wait(request);
  }

  void reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op) override {
    MPI_Request request;
    check_mpi(MPI_Ireduce_scatter_block(send, recv, to_int(count), mpi_type(type), reduction(op, type), t.mpi_comm(),
                                        &request),
              "MPI_Ireduce_scatter_block");
    wait(request);
    finish_average(recv, count, type, op, t.size());
  }

  void barrier(const Transport& t) override {
    MPI_Request request;
    check_mpi(MPI_Ibarrier(t.mpi_comm(), &request), "MPI_Ibarrier");
    wait(request);
  }

  void alltoall(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) override {
    MPI_Request request;
    check_mpi(MPI_Ialltoall(send, to_int(count), mpi_type(type), recv, to_int(count), mpi_type(type), t.mpi_comm(),
                            &request),
              "MPI_Ialltoall");
    wait(request);
  }

  void alltoallv(const Transport& t, const void* send, Blocks send_blocks, void* recv, Blocks recv_blocks,
                 DataType type) override {
    // MPI counts and displacements are ints (and must outlive the request: kept until the wait).
    const std::vector<int> send_counts = ints(send_blocks.counts), send_displs = ints(send_blocks.displs);
    const std::vector<int> recv_counts = ints(recv_blocks.counts), recv_displs = ints(recv_blocks.displs);
    MPI_Request request;
    check_mpi(MPI_Ialltoallv(send, send_counts.data(), send_displs.data(), mpi_type(type), recv, recv_counts.data(),
                             recv_displs.data(), mpi_type(type), t.mpi_comm(), &request),
              "MPI_Ialltoallv");
    wait(request);
  }

  std::unique_ptr<PendingOp> start_allreduce(const Transport& t, void* data, std::size_t count, DataType type,
                                             ReduceOp op) override {
    auto pending = std::make_unique<MpiPending>(data, count, type, op, t.size());
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, to_int(count), mpi_type(type), reduction(op, type), t.mpi_comm(),
                             pending->request()),
              "MPI_Iallreduce");
    return pending;
  }
  std::unique_ptr<PendingOp> start_reduce_scatter(const Transport& t, void* send, void* recv, std::size_t count,
                                                  DataType type, ReduceOp op) override {
    auto pending = std::make_unique<MpiPending>(recv, count, type, op, t.size());
    check_mpi(MPI_Ireduce_scatter_block(send, recv, to_int(count), mpi_type(type), reduction(op, type), t.mpi_comm(),
                                        pending->request()),
              "MPI_Ireduce_scatter_block");
    return pending;
  }
  std::unique_ptr<PendingOp> start_allgather(const Transport& t, const void* send, void* recv, std::size_t count,
                                             DataType type) override {
    const bool in_place = send == static_cast<const char*>(recv) + t.rank() * count * size_of(type);
    auto pending = std::make_unique<MpiPending>(recv, 0, type, ReduceOp::sum, t.size());  // nothing to divide
    check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, to_int(count), mpi_type(type), recv, to_int(count),
                             mpi_type(type), t.mpi_comm(), pending->request()),
              "MPI_Iallgather");
    return pending;
  }

 private:
  // The input of a large in-place allreduce or reduce, copied to run out of place (faster,
  // see kCopyInPlaceFrom); a small one stays in place.
  const void* input_copy(const void* data, std::size_t bytes) {
    if (bytes < kCopyInPlaceFrom) return data;
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    std::memcpy(scratch_.data(), data, bytes);
    return scratch_.data();
  }
  std::vector<std::byte> scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend() { return std::make_unique<MpiBackend>(); }

}  // namespace comm
