// Collectives on GPU memory through comm::Communicator, on every backend this machine can run:
// the staged mpi, ring and naive backends with any number of ranks sharing the GPU, and nccl
// where every rank has a GPU of its own (world size 1 on a one-GPU machine). Each device
// result is copied back and compared with the same call on host memory over mpi; the
// asynchronous forms run several at once and are waited for out of order.
//
//   mpiexec -n 1 test_gpu_collectives      # nccl and the staged backends
//   mpiexec -n 3 test_gpu_collectives      # the staged backends, three ranks on one GPU
//
// Without a GPU it says why and exits 77 (ctest's SKIP_RETURN_CODE): skipped, never passed.
#include <catch2/catch.hpp>

#include "catch_session.hpp"
#include "comm/backends/registry.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/device_memory.hpp"
#include "comm/runtime.hpp"

namespace {

using comm::Communicator;
using comm::ReduceOp;

constexpr int kSkipped = 77;

// Rank r's element i: small integers, exact in every type and any order of addition.
template <class T>
std::vector<T> inputs(int rank, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(static_cast<long long>((rank * 13 + i * 7) % 11) - 5);
  return v;
}

// A device copy of a host vector, and the way back.
template <class T>
class OnDevice {
 public:
  explicit OnDevice(const std::vector<T>& host)
      : buffer_(std::max<std::size_t>(1, host.size()) * sizeof(T)), size_(host.size()) {
    comm::copy_memory(buffer_.data(), host.data(), size_ * sizeof(T));
  }
  explicit OnDevice(std::size_t zeros) : OnDevice(std::vector<T>(zeros)) {}
  std::span<T> span() { return {static_cast<T*>(buffer_.data()), size_}; }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    comm::copy_memory(host.data(), buffer_.data(), size_ * sizeof(T));
    return host;
  }

 private:
  comm::DeviceBuffer buffer_;
  std::size_t size_;
};

// The backends to run: nccl only where each rank of this node has its own GPU.
std::vector<std::string> backends_here() {
  std::vector<std::string> names = {"mpi", "ring", "naive"};
  const auto built = comm::backend_names();
  int own_gpu = comm::runtime().local_size() <= comm::cuda_device_count() ? 1 : 0;
  comm::runtime().world().allreduce(std::span(&own_gpu, 1), ReduceOp::min);
  if (std::find(built.begin(), built.end(), "nccl") != built.end() && own_gpu) names.emplace_back("nccl");
  return names;
}

// Every collective of `c`, on device buffers, against the same call over mpi on host buffers.
template <class T>
void check_every_collective(Communicator& c, Communicator& host) {
  const int n = c.size(), me = c.rank(), root = n - 1;
  const std::size_t count = 4099;  // not a multiple of anything: uneven ring segments
  const auto all = static_cast<std::size_t>(n) * count;
  const auto mine = inputs<T>(me, count), blocks = inputs<T>(me, all);
  const auto on_root = [&](std::size_t size) { return me == root ? size : 0; };

  {
    INFO("allreduce, out of place and in place");
    OnDevice<T> send(mine), recv(count), data(mine);
    c.allreduce(std::span<const T>(send.span()), recv.span(), ReduceOp::sum);
    c.allreduce(data.span(), ReduceOp::max);
    std::vector<T> want_sum(count), want_max = mine;
    host.allreduce(std::span<const T>(mine), std::span(want_sum), ReduceOp::sum);
    host.allreduce(std::span(want_max), ReduceOp::max);
    CHECK(recv.to_host() == want_sum);
    CHECK(data.to_host() == want_max);
  }
  {
    INFO("reduce, out of place and in place");
    OnDevice<T> send(mine), recv(on_root(count)), data(mine);
    c.reduce(std::span<const T>(send.span()), recv.span(), ReduceOp::sum, root);
    c.reduce(data.span(), ReduceOp::min, root);
    std::vector<T> want_sum(on_root(count)), want_min = mine;
    host.reduce(std::span<const T>(mine), std::span(want_sum), ReduceOp::sum, root);
    host.reduce(std::span(want_min), ReduceOp::min, root);
    CHECK(recv.to_host() == want_sum);
    if (me == root) CHECK(data.to_host() == want_min);
  }
  {
    INFO("broadcast");
    OnDevice<T> data(mine);
    c.broadcast(data.span(), root);
    CHECK(data.to_host() == inputs<T>(root, count));
  }
  {
    INFO("allgather, out of place and in place");
    std::vector<T> placed(all);
    std::copy(mine.begin(), mine.end(), placed.begin() + static_cast<std::ptrdiff_t>(count) * me);
    OnDevice<T> send(mine), recv(all), data(placed);
    c.allgather(std::span<const T>(send.span()), recv.span());
    c.allgather(data.span());
    std::vector<T> want(all);
    host.allgather(std::span<const T>(mine), std::span(want));
    CHECK(recv.to_host() == want);
    CHECK(data.to_host() == want);
  }
  {
    INFO("gather and scatter");
    OnDevice<T> send(mine), gathered(on_root(all)), from(me == root ? blocks : std::vector<T>{}), scattered(count);
    c.gather(std::span<const T>(send.span()), gathered.span(), root);
    c.scatter(std::span<const T>(from.span()), scattered.span(), root);
    std::vector<T> want_gathered(on_root(all));
    host.gather(std::span<const T>(mine), std::span(want_gathered), root);
    CHECK(gathered.to_host() == want_gathered);
    const auto root_blocks = inputs<T>(root, all);
    CHECK(scattered.to_host() == std::vector<T>(root_blocks.begin() + static_cast<std::ptrdiff_t>(count) * me,
                                                root_blocks.begin() + static_cast<std::ptrdiff_t>(count) * (me + 1)));
  }
  {
    INFO("reduce_scatter");
    OnDevice<T> send(blocks), recv(count);
    c.reduce_scatter(std::span<const T>(send.span()), recv.span(), ReduceOp::sum);
    std::vector<T> want(count);
    host.reduce_scatter(std::span<const T>(blocks), std::span(want), ReduceOp::sum);
    CHECK(recv.to_host() == want);
  }
  {
    INFO("send_recv round the ring");
    OnDevice<T> out(mine), in(count);
    c.send_recv(std::span<const T>(out.span()), (me + 1) % n, in.span(), (me + n - 1) % n);
    CHECK(in.to_host() == inputs<T>((me + n - 1) % n, count));
  }
}

}  // namespace

TEMPLATE_TEST_CASE("every collective on device memory equals the same call on host memory", "[gpu]", float,
                   std::int64_t, comm::bfloat16) {
  Communicator& world = comm::runtime().world();
  Communicator host = world.with_backend(comm::BackendKind::mpi);
  for (const auto& name : backends_here()) {
    INFO("backend " << name << ", " << world.size() << " ranks");
    Communicator c = world.with_backend(comm::parse_backend(name));
    check_every_collective<TestType>(c, host);
  }
}

TEST_CASE("asynchronous collectives on device memory overlap, complete in any order, and match", "[gpu]") {
  Communicator& world = comm::runtime().world();
  Communicator host = world.with_backend(comm::BackendKind::mpi);
  const auto n = static_cast<std::size_t>(world.size());
  for (const auto& name : backends_here()) {
    INFO("backend " << name);
    Communicator c = world.with_backend(comm::parse_backend(name));
    // Per unit k: an allreduce, a reduce-scatter and an allgather, all started before any is
    // waited for (gradient buckets, ZeRO's pair); sizes from one element to past a ring segment.
    const std::vector<std::size_t> counts = {1, 1001, 300'007};
    std::vector<OnDevice<float>> reduced, sends, shards, own, gathered;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      reduced.emplace_back(inputs<float>(c.rank() + int(k), counts[k]));
      sends.emplace_back(inputs<float>(c.rank() * 2 + int(k), n * counts[k]));
      shards.emplace_back(counts[k]);
      own.emplace_back(inputs<float>(c.rank() * 3 + int(k), counts[k]));
      gathered.emplace_back(n * counts[k]);
    }
    std::vector<comm::Work> pending;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      pending.push_back(c.allreduce_async(reduced[k].span(), ReduceOp::avg));
      pending.push_back(c.reduce_scatter_async(sends[k].span(), shards[k].span(), ReduceOp::sum));
      pending.push_back(c.allgather_async(std::span<const float>(own[k].span()), gathered[k].span()));
    }
    while (!pending[0].test()) {
    }  // the first one polled to the end, as a training loop would between its own work
    for (std::size_t i : {8, 2, 5, 1, 7, 3, 6, 4, 0}) pending[i].wait();
    for (auto& work : pending) CHECK(work.done());
    for (std::size_t k = 0; k < counts.size(); ++k) {
      INFO("count " << counts[k]);
      auto want_reduced = inputs<float>(c.rank() + int(k), counts[k]);
      host.allreduce(std::span(want_reduced), ReduceOp::avg);
      const auto full = inputs<float>(c.rank() * 2 + int(k), n * counts[k]);
      std::vector<float> want_shard(counts[k]), want_gathered(n * counts[k]);
      host.reduce_scatter(std::span<const float>(full), std::span(want_shard), ReduceOp::sum);
      host.allgather(std::span<const float>(inputs<float>(c.rank() * 3 + int(k), counts[k])), std::span(want_gathered));
      CHECK(reduced[k].to_host() == want_reduced);
      CHECK(shards[k].to_host() == want_shard);
      CHECK(gathered[k].to_host() == want_gathered);
    }
  }
}

// As mpi_test_main, but first: is there a GPU? None on any rank: every rank exits 77.
int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  int failed = 1;
  const int status = runtime.run([&] {
    comm::Options options;
    options.timeout_s = 120;  // a hang ends as the watchdog's report, not a CI time-out
    Communicator& world = runtime.start(options);
    int devices = comm::cuda_device_count();
    world.allreduce(std::span(&devices, 1), ReduceOp::min);
    if (devices == 0) {
      if (world.rank() == 0) std::printf("skipped: no GPU on this machine (%s)\n", comm::why_no_device().c_str());
      failed = kSkipped;
      return;
    }
    comm::select_device(runtime.local_rank(), "test_gpu_collectives");
    comm::use_device_memory("test_gpu_collectives");
    const int result = run_catch_session(argc, argv);
    if (result < 0) throw comm::UsageError("bad Catch2 arguments");
    int mine = result != 0 ? 1 : 0;
    world.allreduce(std::span<const int>(&mine, 1), std::span<int>(&failed, 1), ReduceOp::max);
  });
  return status != 0 ? status : failed;
}
