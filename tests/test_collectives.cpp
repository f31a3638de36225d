// Every backend gives the mpi backend's answer: bit-identical for integers, within
// floating-point reordering tolerance for floats — for every collective, element type,
// reduction, root, count (0, 1, 7, a prime larger than the rank count, counts not
// divisible by the rank count, a few million), in place and out of place, on the world
// and on sub-communicators from split(). Run under mpiexec with 1 to 5 ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <sys/uio.h>
#include <unistd.h>

#include "comm/backends/registry.hpp"
#include "comm/runtime.hpp"

namespace {

using comm::Communicator;
using comm::ReduceOp;

const std::vector<std::size_t> kCounts = {0, 1, 7, 13, 1001};
// A few million, prime. Under the sanitizers (5 ranks on 2 cores, every access checked) less
// than half: 5.6 MB of floats still passes every size threshold on every backend — the ring's
// 1 MiB segments (each rank's block in two or more, on 2 to 5 ranks), shm's 1 MiB areas (six
// rounds) and 256 KiB chunks, single copy — and divides by none of 2–5.
#ifdef NANODIST_SANITIZER_BUILD
constexpr std::size_t kLarge = 1'400'017;
#else
constexpr std::size_t kLarge = 3'000'017;
#endif
const std::vector<ReduceOp> kOps = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};

// Rank r's element i: varied, signed, and small enough that products of 5 cannot overflow.
template <class T>
T input(int rank, std::size_t i, ReduceOp op) {
  const auto k = static_cast<long long>(i);
  if (op == ReduceOp::prod) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>((rank + k) % 4 - 1);  // -1, 0, 1, 2
    else
      return static_cast<T>(1.0 + 0.1 * static_cast<double>((rank * 31 + k) % 7 - 3));
  }
  const long long v = ((rank + 1) * 7919LL + k * 104729LL) % 2001 - 1000;
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(v);
  else
    return static_cast<T>(static_cast<double>(v) / 8.0);
}

template <class T>
std::vector<T> inputs(int rank, std::size_t count, ReduceOp op = ReduceOp::sum) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input<T>(rank, i, op);
  return v;
}

// Counts elements that differ: exactly for integers, by a relative tolerance for floats.
template <class T>
std::size_t mismatches(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return std::max<std::size_t>(1, std::max(got.size(), want.size()));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if constexpr (std::is_integral_v<T>) {
      bad += got[i] != want[i];
    } else {
      // bf16 keeps 8 significant bits, and rounds every partial sum: in another order the
      // error is up to half an ulp of the partial sums (< 1024 here: ulp 4) per addition, even
      // when the result is small — hence the absolute slack on top of the relative one.
      const double relative = std::is_same_v<T, float> ? 1e-5 : std::is_same_v<T, double> ? 1e-12 : 3e-2;
      const double slack = std::is_same_v<T, comm::bfloat16> ? 10.0 : 0.0;
      const double tolerance = relative * (1.0 + std::abs(double(want[i]))) + slack;
      bad += !(std::abs(double(got[i]) - double(want[i])) <= tolerance);
    }
  }
  return bad;
}

// Runs `collective` on the reference (mpi) and the tested communicator; compares results.
template <class T, class Run>
void same_as_reference(Communicator& reference, Communicator& tested, Run collective) {
  std::vector<T> want = collective(reference);
  std::vector<T> got = collective(tested);
  CHECK(mismatches(got, want) == 0);
}

struct Backends {
  Communicator reference;
  std::vector<Communicator> tested;
};

Backends& backends() {
  // Created once, in the same order on every rank (creation is collective). Never freed:
  // a static's destructor would run after MPI_Finalize, too late to free communicators.
  static Backends& b = *new Backends([] {
    Communicator& world = comm::runtime().world();
    Backends made{world.with_backend(comm::BackendKind::mpi), {}};
    made.tested.push_back(world.with_backend(comm::BackendKind::mpi));
    made.tested.push_back(world.with_backend(comm::BackendKind::ring));
    made.tested.push_back(world.with_backend(comm::BackendKind::naive));
    made.tested.push_back(world.with_backend(comm::BackendKind::shm));
    return made;
  }());
  return b;
}

template <class T>
void all_collectives(Communicator& ref, Communicator& comm, std::size_t count, bool in_place) {
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t un = static_cast<std::size_t>(n);
  INFO("backend " << comm.backend_name() << ", " << n << " ranks, count " << count << ", type "
                  << comm::name_of(comm::datatype_of<T>()) << (in_place ? ", in place" : ""));

  for (ReduceOp op : kOps) {
    INFO("op " << comm::name_of(op));
    same_as_reference<T>(ref, comm, [&](Communicator& c) {
      auto data = inputs<T>(me, count, op);
      if (in_place) {
        c.allreduce(std::span(data), op);
        return data;
      }
      std::vector<T> out(count);
      c.allreduce(std::span<const T>(data), std::span(out), op);
      return out;
    });
    same_as_reference<T>(ref, comm, [&](Communicator& c) {
      auto data = inputs<T>(me, count * un, op);
      std::vector<T> out(count);
      c.reduce_scatter(std::span<const T>(data), std::span(out), op);
      return out;
    });
    for (int root = 0; root < n; ++root) {
      INFO("root " << root);
      same_as_reference<T>(ref, comm, [&](Communicator& c) {
        auto data = inputs<T>(me, count, op);
        if (in_place) {
          c.reduce(std::span(data), op, root);
          return me == root ? data : std::vector<T>{};
        }
        std::vector<T> out(me == root ? count : 0);
        c.reduce(std::span<const T>(data), std::span(out), op, root);
        return out;
      });
    }
  }
  for (int root = 0; root < n; ++root) {
    INFO("root " << root);
    same_as_reference<T>(ref, comm, [&](Communicator& c) {
      auto data = me == root ? inputs<T>(root, count) : std::vector<T>(count);
      c.broadcast(std::span(data), root);
      return data;
    });
    same_as_reference<T>(ref, comm, [&](Communicator& c) {
      auto data = inputs<T>(me, count);
      std::vector<T> out(me == root ? count * un : 0);
      c.gather(std::span<const T>(data), std::span(out), root);
      return out;
    });
    same_as_reference<T>(ref, comm, [&](Communicator& c) {
      auto data = me == root ? inputs<T>(root, count * un) : std::vector<T>{};
      std::vector<T> out(count);
      c.scatter(std::span<const T>(data), std::span(out), root);
      return out;
    });
  }
  same_as_reference<T>(ref, comm, [&](Communicator& c) {  // (no in-place form)
    // Blocks of count/n (rounded up): a buffer of about `count`, as the others move.
    const std::size_t block = (count + un - 1) / un;
    auto data = inputs<T>(me, block * un);
    std::vector<T> out(block * un);
    c.alltoall(std::span<const T>(data), std::span(out));
    return out;
  });
  same_as_reference<T>(ref, comm, [&](Communicator& c) {
    auto data = inputs<T>(me, count);
    std::vector<T> out(count * un);
    if (in_place) {
      std::copy(data.begin(), data.end(),
                out.begin() + static_cast<std::ptrdiff_t>(count * static_cast<std::size_t>(me)));
      c.allgather(std::span(out));
    } else {
      c.allgather(std::span<const T>(data), std::span(out));
    }
    return out;
  });
}

// The same ranks running `backend`, whose asynchronous forms progress as `progress` says (the
// mode is given when a communicator is made).
Communicator async_communicator(Communicator& world, const char* backend, comm::Progress progress) {
  return world.with_backend(comm::parse_backend(backend), comm::runtime().backend_settings(), progress);
}

constexpr comm::Progress kProgressModes[] = {comm::Progress::caller, comm::Progress::thread};
const char* name_of(comm::Progress p) { return p == comm::Progress::thread ? "thread" : "caller"; }

}  // namespace

TEMPLATE_TEST_CASE("every backend matches the mpi backend", "[collectives]", float, double, std::int32_t, std::int64_t,
                   comm::bfloat16) {
  auto& b = backends();
  for (auto& tested : b.tested)
    for (std::size_t count : kCounts)
      for (bool in_place : {false, true}) all_collectives<TestType>(b.reference, tested, count, in_place);
}

TEMPLATE_TEST_CASE("large buffers: every backend matches the mpi backend", "[collectives][large]", float,
                   std::int32_t) {
  auto& b = backends();
  const int me = b.reference.rank();
  const std::size_t n = static_cast<std::size_t>(b.reference.size());
  for (auto& tested : b.tested) {
    INFO("backend " << tested.backend_name());
    same_as_reference<TestType>(b.reference, tested, [&](Communicator& c) {
      auto data = inputs<TestType>(me, kLarge);
      c.allreduce(std::span(data), ReduceOp::sum);
      return data;
    });
    same_as_reference<TestType>(b.reference, tested, [&](Communicator& c) {
      auto data = me == 0 ? inputs<TestType>(0, kLarge) : std::vector<TestType>(kLarge);
      c.broadcast(std::span(data), 0);
      return data;
    });
    const std::size_t block = kLarge / n + 1;  // blocks of a size not divisible by the rank count
    same_as_reference<TestType>(b.reference, tested, [&](Communicator& c) {
      auto data = inputs<TestType>(me, block * n);
      std::vector<TestType> out(block);
      c.reduce_scatter(std::span<const TestType>(data), std::span(out), ReduceOp::sum);
      return out;
    });
    same_as_reference<TestType>(b.reference, tested, [&](Communicator& c) {
      auto data = inputs<TestType>(me, block);
      std::vector<TestType> out(block * n);
      c.allgather(std::span<const TestType>(data), std::span(out));
      return out;
    });
  }
}

// The world on shm, every `per_node` ranks pretending to be a node (NANODIST_SHM_RANKS_PER_NODE).
Communicator shm_in_nodes_of(int per_node) {
  comm::BackendSettings settings = comm::runtime().backend_settings();
  settings.shm.ranks_per_node = per_node;
  return comm::runtime().world().with_backend(comm::BackendKind::shm, settings, comm::Progress::caller);
}

// The world on shm with single copy off: copy-in alone (NANODIST_SHM_SINGLE_COPY=0).
Communicator shm_copy_in() {
  comm::BackendSettings settings = comm::runtime().backend_settings();
  settings.shm.single_copy = false;
  return comm::runtime().world().with_backend(comm::BackendKind::shm, settings, comm::Progress::caller);
}

// Whether every rank can read and write every other's memory in place (process_vm_readv and
// _writev: ptrace rights, which Yama, seccomp or a container may refuse), tried directly —
// each rank offers a word and its pid — after the shm backend has asked for the rights.
bool cross_memory_attach_works(Communicator& reference) {
  const int n = reference.size(), me = reference.rank();
  std::int64_t word = 1000 + me, inbox = 0;  // live until the closing allreduce: every peer is done
  const std::int64_t mine[3] = {getpid(), static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&word)),
                                static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&inbox))};
  std::vector<std::int64_t> all(3 * static_cast<std::size_t>(n));
  reference.allgather(std::span<const std::int64_t>(mine, 3), std::span(all));
  std::int32_t works = 1;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    const std::int64_t* peer = &all[3 * static_cast<std::size_t>(r)];
    std::int64_t got = 0, sent = me;
    iovec into{&got, sizeof got}, from{reinterpret_cast<void*>(static_cast<std::uintptr_t>(peer[1])), sizeof got};
    iovec out{&sent, sizeof sent}, to{reinterpret_cast<void*>(static_cast<std::uintptr_t>(peer[2])), sizeof sent};
    const auto pid = static_cast<pid_t>(peer[0]);
    works &= process_vm_readv(pid, &into, 1, &from, 1, 0) == static_cast<ssize_t>(sizeof got) && got == 1000 + r;
    works &= process_vm_writev(pid, &out, 1, &to, 1, 0) == static_cast<ssize_t>(sizeof sent);
  }
  reference.allreduce(std::span(&works, 1), ReduceOp::min);
  return works == 1;
}

// shm moves a message one of three ways: in one shot through the staging areas (up to an
// area, 1 MiB), in rounds of an area (copy-in), or read (and, for the allreduce, written) in
// place in the peers' buffers (single copy, where ranks may: a probe decides at start; the
// allreduce and allgather from 48 KiB, the rest past an area). Counts just past an area make
// two rounds, the second of a few elements; NANODIST_SHM_SINGLE_COPY=0 at the
// communicator's creation forces copy-in, the path of machines that forbid the reads.
TEST_CASE("shm: one shot, rounds of copy-in and single copy give the mpi backend's answer", "[collectives][shm]") {
  auto& b = backends();
  Communicator& world = comm::runtime().world();
  Communicator copy_in = shm_copy_in();
  Communicator single_copy = world.with_backend(comm::BackendKind::shm);
  // The backend's probe found what this machine permits (here tried again directly): else
  // every answer below would still be right, on copy-in alone, and nothing would say so.
  if (world.size() > 1) {
    CHECK_THAT(copy_in.backend_description(), Catch::Contains("copy-in"));
    const bool permitted = cross_memory_attach_works(b.reference);
    INFO("process_vm_readv/writev between the ranks " << (permitted ? "works" : "is refused"));
    CHECK_THAT(single_copy.backend_description(), Catch::Contains(permitted ? "single copy" : "copy-in"));
  }
  for (Communicator* tested : {&single_copy, &copy_in}) {
    INFO((tested == &copy_in ? "copy-in forced" : "single copy where permitted"));
    // (one form per type: the sanitizer build runs this on 5 ranks too)
    all_collectives<float>(b.reference, *tested, 262'147, true);  // 4 bytes × 262'147 > 1 MiB
    all_collectives<std::int32_t>(b.reference, *tested, 300'007, false);
  }
  // Past 48 KiB and under an area the allreduce and allgather take single copy (copy-in takes
  // one shot there, as the small counts above): both forms, two element sizes.
  all_collectives<float>(b.reference, single_copy, 13'001, false);
  all_collectives<double>(b.reference, single_copy, 7'001, true);
}

// Across nodes, shm's allreduce, reduce-scatter and allgather are hierarchical (shared memory
// in each node, rings between the nodes). shm ranks_per_node K (NANODIST_SHM_RANKS_PER_NODE) makes every K ranks a
// node on this one machine: K = 1 (a rank per node), K = 2 (even nodes on 2 and 4 ranks, on 3
// and 5 ranks a node of one rank, where every collective takes the ring instead).
TEST_CASE("shm across nodes: hierarchical collectives give the mpi backend's answer", "[collectives][shm]") {
  auto& b = backends();
  for (int per_node : {1, 2}) {
    INFO("shm ranks per node " << per_node);
    Communicator nodes = shm_in_nodes_of(per_node);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{1001}})
      for (bool in_place : {false, true}) {
        all_collectives<std::int32_t>(b.reference, nodes, count, in_place);
        all_collectives<float>(b.reference, nodes, count, in_place);
      }
    all_collectives<float>(b.reference, nodes, 300'007, true);  // single copy inside the nodes
  }
}

// Data parallelism rests on this: after an allreduce every rank holds the same bits, or the
// replicas drift apart. Floats whose sums round (magnitudes 2⁻¹⁰ … 2¹⁰, thirds) make any
// rank that added in another order show up; with 2 ranks a + b = b + a, so the teeth are in
// the 3- to 5-rank runs. Each size takes another path: one shot, single copy under an area,
// rounds through the areas; shm also across two and one-rank "nodes" (hierarchical).
template <class T>
void same_bits_on_every_rank(Communicator& reference, Communicator& tested, std::size_t count, bool in_place) {
  const int n = tested.size(), me = tested.rank();
  INFO("backend " << tested.backend_name() << ", " << n << " ranks, count " << count << ", type "
                  << comm::name_of(comm::datatype_of<T>()) << (in_place ? ", in place" : ""));
  auto value = [](int rank, std::size_t i) {
    return static_cast<T>(std::ldexp(static_cast<double>(input<T>(rank, i, ReduceOp::sum)) / 3.0,
                                     static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 21) - 10));
  };
  std::vector<T> data(count), result(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = value(me, i);
  if (n >= 3) {  // the teeth: summed in rank order and in reverse, many elements round apart
    std::size_t order_matters = 0;
    for (std::size_t i = 0; i < count; ++i) {
      T forward = 0, backward = 0;
      for (int r = 0; r < n; ++r) forward += value(r, i);
      for (int r = n - 1; r >= 0; --r) backward += value(r, i);
      order_matters += forward != backward;
    }
    CHECK(order_matters > count / 10);
  }
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    INFO("op " << comm::name_of(op));
    if (in_place) {
      result = data;
      tested.allreduce(std::span(result), op);
    } else {
      tested.allreduce(std::span<const T>(data), std::span(result), op);
    }
    std::vector<T> everyone(count * static_cast<std::size_t>(n));
    reference.allgather(std::span<const T>(result), std::span(everyone));
    std::size_t differ = 0;
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i)
        differ += std::memcmp(&everyone[static_cast<std::size_t>(r) * count + i], &result[i], sizeof(T)) != 0;
    CHECK(differ == 0);
  }
}

TEST_CASE("allreduce leaves the same bits on every rank, on every backend and path", "[collectives]") {
  auto& b = backends();
  Communicator copy_in = shm_copy_in();  // shm's rounds through the areas (single copy takes the larger sizes)
  std::vector<Communicator*> all_paths = {&copy_in};
  for (Communicator& tested : b.tested) all_paths.push_back(&tested);
  for (Communicator* tested : all_paths)
    for (bool in_place : {false, true}) {
      for (std::size_t count : {std::size_t{7}, std::size_t{13'001}, std::size_t{262'147}})
        same_bits_on_every_rank<float>(b.reference, *tested, count, in_place);
      same_bits_on_every_rank<double>(b.reference, *tested, 7'001, in_place);
    }
  for (int per_node : {1, 2}) {
    INFO("shm ranks per node " << per_node);
    Communicator nodes = shm_in_nodes_of(per_node);
    for (bool in_place : {false, true}) same_bits_on_every_rank<float>(b.reference, nodes, 100'003, in_place);
  }
}

TEST_CASE("allreduce: buffers that half overlap are a usage error on every backend", "[collectives]") {
  auto& b = backends();
  std::vector<float> data(10, 1.0f);
  for (auto& tested : b.tested) {
    INFO("backend " << tested.backend_name());
    CHECK_THROWS_AS(tested.allreduce(std::span<const float>(data.data(), 6), std::span<float>(data.data() + 2, 6),
                                     ReduceOp::sum),
                    comm::UsageError);
  }
  CHECK(data == std::vector<float>(10, 1.0f));  // refused before anything moved
}

TEST_CASE("the mpi reference itself computes the textbook results", "[collectives]") {
  Communicator& world = backends().reference;
  const int n = world.size();
  std::vector<std::int64_t> data(5, world.rank() + 1);
  world.allreduce(std::span(data), ReduceOp::sum);
  CHECK(data == std::vector<std::int64_t>(5, n * (n + 1) / 2));
  std::vector<std::int32_t> mine = {world.rank()};
  std::vector<std::int32_t> all(static_cast<std::size_t>(n));
  world.allgather(std::span<const std::int32_t>(mine), std::span(all));
  for (int r = 0; r < n; ++r) CHECK(all[static_cast<std::size_t>(r)] == r);
}

TEST_CASE("sub-communicators from split() run every backend correctly", "[collectives][split]") {
  Communicator& world = comm::runtime().world();
  for (const char* name : {"mpi", "ring", "naive", "shm"}) {
    INFO("backend " << name);
    Communicator backend_world = world.with_backend(comm::parse_backend(name));
    // Even and odd world ranks, ordered backwards to make the new ranks differ from the old.
    Communicator half = backend_world.split(world.rank() % 2, -world.rank());
    Communicator reference = half.with_backend(comm::BackendKind::mpi);
    const int expected_size = (world.size() + (world.rank() % 2 == 0 ? 1 : 0)) / 2;
    CHECK(half.size() == expected_size);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{1001}}) {
      all_collectives<std::int32_t>(reference, half, count, false);
      all_collectives<float>(reference, half, count, true);
    }
    // The members are right: the sum of world ranks in my half.
    std::vector<std::int64_t> rank_sum = {world.rank()};
    half.allreduce(std::span(rank_sum), ReduceOp::sum);
    std::int64_t expected = 0;
    for (int r = world.rank() % 2; r < world.size(); r += 2) expected += r;
    CHECK(rank_sum[0] == expected);
  }
}

TEST_CASE("asynchronous allreduces overlap, complete in any wait order, and match", "[collectives][async]") {
  Communicator& world = comm::runtime().world();
  for (const comm::Progress progress : kProgressModes)
  for (const char* name : {"mpi", "ring", "naive", "shm"}) {
    INFO("backend " << name << ", progress " << name_of(progress));
    Communicator c = async_communicator(world, name, progress);
    // Several in flight at once, as gradient buckets are; waited for in reverse order.
    std::vector<std::vector<float>> buckets;
    for (std::size_t k = 0; k < 4; ++k) buckets.push_back(inputs<float>(c.rank() + static_cast<int>(k), 1000 + 37 * k));
    std::vector<comm::Work> pending;
    for (auto& bucket : buckets) pending.push_back(c.allreduce_async(std::span(bucket), ReduceOp::avg));
    for (auto& work : pending) work.test();
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) it->wait();
    for (auto& work : pending) CHECK(work.done());
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      auto want = inputs<float>(c.rank() + static_cast<int>(k), 1000 + 37 * k);
      c.allreduce(std::span(want), ReduceOp::avg);
      CHECK(mismatches(buckets[k], want) == 0);
    }
  }
}

TEST_CASE("asynchronous reduce-scatters and allgathers (ZeRO's pair) interleave, complete in any order, and match",
          "[collectives][async]") {
  Communicator& world = comm::runtime().world();
  const auto n = static_cast<std::size_t>(world.size());
  for (const comm::Progress progress : kProgressModes)
  for (const char* name : {"mpi", "ring", "naive", "shm"}) {
    INFO("backend " << name << ", progress " << name_of(progress));
    Communicator c = async_communicator(world, name, progress);
    // Per unit k: a reduce-scatter of n blocks of `count` and an allgather of `count`, all
    // started before any is waited for; counts include 0 and sizes larger than a ring segment.
    const std::vector<std::size_t> counts = {0, 1, 1001, 300'007};
    std::vector<std::vector<float>> sends, shards, gathered, own;
    std::vector<comm::Work> pending;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      sends.push_back(inputs<float>(c.rank() + static_cast<int>(k), n * counts[k]));
      shards.emplace_back(counts[k]);
      own.push_back(inputs<float>(c.rank() * 3 + static_cast<int>(k), counts[k]));
      gathered.emplace_back(n * counts[k]);
    }
    for (std::size_t k = 0; k < counts.size(); ++k) {
      pending.push_back(c.reduce_scatter_async(std::span(sends[k]), std::span(shards[k]), ReduceOp::avg));
      pending.push_back(c.allgather_async(std::span<const float>(own[k]), std::span(gathered[k])));
    }
    for (auto& work : pending) work.test();
    for (std::size_t i : {5, 0, 7, 2, 1, 6, 3, 4}) pending[i].wait();  // any order
    for (auto& work : pending) CHECK(work.done());
    for (std::size_t k = 0; k < counts.size(); ++k) {
      INFO("count " << counts[k]);
      auto full = inputs<float>(c.rank() + static_cast<int>(k), n * counts[k]);
      std::vector<float> want_shard(counts[k]), want_gathered(n * counts[k]);
      c.reduce_scatter(std::span<const float>(full), std::span(want_shard), ReduceOp::avg);
      c.allgather(std::span<const float>(own[k]), std::span(want_gathered));
      CHECK(mismatches(shards[k], want_shard) == 0);
      CHECK(mismatches(gathered[k], want_gathered) == 0);
    }
    // In place: this rank's block already sits in the gathered buffer.
    std::vector<std::int64_t> in_place(n * 5);
    for (std::size_t i = 0; i < 5; ++i) in_place[static_cast<std::size_t>(c.rank()) * 5 + i] = c.rank() * 100 + int(i);
    auto block = std::span<const std::int64_t>(in_place).subspan(static_cast<std::size_t>(c.rank()) * 5, 5);
    c.allgather_async(block, std::span(in_place)).wait();
    for (std::size_t i = 0; i < in_place.size(); ++i)
      CHECK(in_place[i] == static_cast<std::int64_t>(i / 5 * 100 + i % 5));
  }
}

TEST_CASE("with --progress thread an asynchronous collective moves while its caller is busy elsewhere",
          "[collectives][async]") {
  Communicator& world = comm::runtime().world();
  if (world.size() < 2) return;  // it needs a partner
  for (const char* name : {"mpi", "ring", "naive", "shm"}) {
    INFO("backend " << name);
    Communicator c = async_communicator(world, name, comm::Progress::thread);
    const std::size_t count = 1 << 20;  // many ring steps
    std::vector<float> data = inputs<float>(c.rank(), count), want = data;
    world.allreduce(std::span(want));
    std::vector<int> token = {7};
    // 1. Rank 1 enters the allreduce only after rank 0 has gone on past its start: caller
    //    progress that does the work at the start (shm, naive) would wait there for ever.
    if (c.rank() == 0) {
      comm::Work work = c.allreduce_async(std::span(data));
      world.send(std::span<const int>(token), 1);
      work.wait();
    } else {
      if (c.rank() == 1) world.recv(std::span(token), 0);
      c.allreduce(std::span(data));
    }
    CHECK(mismatches(data, want) == 0);
    // 2. Rank 0 blocks in a receive that rank 1 sends only once the allreduce is over: caller
    //    progress that moves only when tested (the ring) would never finish it.
    data = inputs<float>(c.rank(), count);
    if (c.rank() == 0) {
      comm::Work work = c.allreduce_async(std::span(data));
      world.recv(std::span(token), 1);
      work.wait();
    } else {
      c.allreduce(std::span(data));
      if (c.rank() == 1) world.send(std::span<const int>(token), 0);
    }
    CHECK(mismatches(data, want) == 0);
  }
}

TEST_CASE("send_recv_async: a ring step while the caller works, by caller progress and on the communication thread",
          "[collectives][async]") {
  Communicator& world = comm::runtime().world();
  const int n = world.size(), next = (world.rank() + 1) % n, previous = (world.rank() + n - 1) % n;
  const std::size_t count = 1 << 20;  // 4 MB: past any eager limit, the receiver must take part
  for (const comm::Progress progress : {comm::Progress::caller, comm::Progress::thread})
    for (const char* name : {"mpi", "ring", "shm"}) {
      INFO("backend " << name << (progress == comm::Progress::thread ? ", thread progress" : ", caller progress"));
      Communicator c = async_communicator(world, name, progress);
      std::vector<float> out = inputs<float>(c.rank(), count), in(count, -1.0f);
      comm::Work step = c.send_recv_async(std::span<const float>(out), next, std::span(in), previous);
      // Busy outside any MPI call for 200 ms: on the communication thread the step is over
      // before the caller comes back to it.
      std::this_thread::sleep_for(std::chrono::milliseconds(progress == comm::Progress::thread ? 200 : 0));
      const auto back = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
      step.wait();
      CHECK(mismatches(in, inputs<float>(previous, count)) == 0);
      if (progress == comm::Progress::thread) CHECK(step.ran_ns().second < back);
    }
}

TEST_CASE("a receive from any rank names each sender; sends posted with isend need no partner waiting",
          "[collectives][p2p]") {
  Communicator& world = comm::runtime().world();
  if (world.size() < 2) return;
  for (const char* name : {"mpi", "ring", "naive", "shm"}) {
    INFO("backend " << name);
    Communicator c = world.with_backend(comm::parse_backend(name));
    const std::size_t count = 1 << 18;  // past the eager size: a blocking send would wait for its receive
    const int tag = 3;
    if (c.rank() == 0) {
      std::vector<int> senders;
      for (int k = 1; k < c.size(); ++k) {
        std::vector<float> got(count);
        comm::Work received = c.irecv(std::span(got), Communicator::kAnySource, tag);
        received.wait();
        const int from = received.source();
        senders.push_back(from);
        CHECK(mismatches(got, inputs<float>(from, count)) == 0);
      }
      std::sort(senders.begin(), senders.end());
      for (int k = 1; k < c.size(); ++k) CHECK(senders[static_cast<std::size_t>(k - 1)] == k);
    } else {
      const std::vector<float> mine = inputs<float>(c.rank(), count);
      comm::Work sent = c.isend(std::span<const float>(mine), 0, tag);
      sent.wait();
    }
    // A ring exchange of large messages, every rank sending first: only a send that returns at
    // once lets each rank go on to its receive. (Another tag: rank 0's receives from any rank
    // above must never take a ring message, which may arrive before another rank's first.)
    const int next = (c.rank() + 1) % c.size(), previous = (c.rank() + c.size() - 1) % c.size();
    const std::vector<float> out = inputs<float>(c.rank() + 7, count);
    std::vector<float> in(count);
    comm::Work sent = c.isend(std::span<const float>(out), next, tag + 1);
    comm::Work received = c.irecv(std::span(in), previous, tag + 1);
    received.wait();
    sent.wait();
    CHECK(received.source() == previous);
    CHECK(mismatches(in, inputs<float>(previous + 7, count)) == 0);
  }
}

TEST_CASE("isend and irecv match by source and tag, on a lane no collective's step can take", "[collectives][p2p]") {
  Communicator& world = comm::runtime().world();
  if (world.size() < 2) return;
  for (const char* name : {"mpi", "ring", "shm"}) {
    INFO("backend " << name);
    Communicator c = world.with_backend(comm::parse_backend(name));
    const std::size_t big = 1 << 18;  // past the eager size
    // Rank 0 sends two messages to rank 1 with tags 1 and 2; rank 1 takes them in the other
    // order, each by its tag. Between posting and waiting, every rank runs an allreduce and a
    // ring step (send_recv, the algorithms' point-to-point): neither takes a tagged message.
    std::vector<float> first = inputs<float>(11, big), second = inputs<float>(12, 5);
    std::vector<float> got_first(big), got_second(5);
    std::vector<comm::Work> posted;
    if (c.rank() == 0) {
      posted.push_back(c.isend(std::span<const float>(first), 1, 1));
      posted.push_back(c.isend(std::span<const float>(second), 1, 2));
    } else if (c.rank() == 1) {
      posted.push_back(c.irecv(std::span(got_second), 0, 2));
      posted.push_back(c.irecv(std::span(got_first), 0, 1));
    }
    std::vector<std::int64_t> sum = {1, 2};
    c.allreduce(std::span(sum));
    const int next = (c.rank() + 1) % c.size(), previous = (c.rank() + c.size() - 1) % c.size();
    std::vector<float> step_in(5);
    const std::vector<float> step_out = inputs<float>(c.rank(), 5);
    c.send_recv(std::span<const float>(step_out), next, std::span(step_in), previous);
    for (auto& w : posted) w.wait();
    CHECK(sum[1] == 2 * c.size());
    CHECK(mismatches(step_in, inputs<float>(previous, 5)) == 0);
    if (c.rank() == 1) {
      CHECK(mismatches(got_first, first) == 0);
      CHECK(mismatches(got_second, second) == 0);
    }
    // A receive from any rank takes the first message with its tag and names the sender.
    if (c.rank() == 0) {
      for (int k = 1; k < c.size(); ++k) {
        std::vector<std::int32_t> got(3);
        comm::Work w = c.irecv(std::span(got), Communicator::kAnySource, 7);
        w.wait();
        REQUIRE(w.source() >= 1);
        CHECK(got == inputs<std::int32_t>(w.source(), 3));
      }
    } else {
      const std::vector<std::int32_t> mine = inputs<std::int32_t>(c.rank(), 3);
      c.isend(std::span<const std::int32_t>(mine), 0, 7).wait();
    }
    // A message that does not fill the receive exactly is an error naming both sizes.
    if (c.rank() < 2) {
      std::vector<float> three(3), four(4);
      if (c.rank() == 0) {
        c.isend(std::span<const float>(three), 1, 9).wait();
      } else {
        comm::Work w = c.irecv(std::span(four), 0, 9);
        CHECK_THROWS_WITH(w.wait(), Catch::Contains("rank 0 sent 3 float elements with tag 9, this receive takes 4"));
      }
    }
    CHECK_THROWS_WITH(c.isend(std::span<const float>(first), next, -1), Catch::Contains("tag -1 is outside"));
    c.barrier();
  }
}

TEST_CASE("uint8 reduces on every backend, and the bitwise operators reduce integers only", "[collectives]") {
  auto& b = backends();
  const int me = b.reference.rank();
  for (auto& tested : b.tested) {
    INFO("backend " << tested.backend_name());
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::band, ReduceOp::bor,
                        ReduceOp::bxor}) {
      INFO("op " << comm::name_of(op));
      same_as_reference<std::uint8_t>(b.reference, tested, [&](Communicator& c) {
        std::vector<std::uint8_t> data(1001);
        for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 37 + me * 101 + 3);
        c.allreduce(std::span(data), op);
        return data;
      });
      same_as_reference<std::int64_t>(b.reference, tested, [&](Communicator& c) {
        auto data = inputs<std::int64_t>(me, 13, op);
        c.allreduce(std::span(data), op);
        return data;
      });
    }
    // The bitwise operators against a fold computed here.
    std::vector<std::int32_t> data(7), want(7);
    for (std::size_t i = 0; i < data.size(); ++i) {
      data[i] = static_cast<std::int32_t>((me + 1) * 0x1111 + i);
      want[i] = static_cast<std::int32_t>(0x1111 + i);
      for (int r = 1; r < tested.size(); ++r) want[i] ^= static_cast<std::int32_t>((r + 1) * 0x1111 + i);
    }
    tested.allreduce(std::span(data), ReduceOp::bxor);
    CHECK(data == want);
    std::vector<float> floats(3);
    CHECK_THROWS_WITH(tested.allreduce(std::span(floats), ReduceOp::band),
                      Catch::Contains("the bitwise reduction band takes integers, not float"));
  }
}

// Rank i's block for rank j: (i + 2j + extra) mod 5 elements (some empty), each element
// naming its sender, its receiver and its place, so a block in the wrong place shows.
std::size_t uneven_count(int from, int to, std::size_t extra) {
  return (static_cast<std::size_t>(from) + 2 * static_cast<std::size_t>(to) + extra) % 5 * (1 + extra);
}
double element_of(int from, int to, std::size_t k) { return 1000.0 * from + 10.0 * to + static_cast<double>(k) / 64; }

TEST_CASE("alltoallv: uneven blocks (empty ones too) at scattered places land where MPI_Alltoallv puts them, on "
          "every backend",
          "[collectives][alltoall]") {
  auto& b = backends();
  Communicator& world = comm::runtime().world();
  Communicator copy_in = shm_copy_in();  // shm where single copy is refused: the pairwise exchange
  std::vector<Communicator*> tested = {&b.reference, &copy_in};
  for (Communicator& c : b.tested) tested.push_back(&c);
  const int n = world.size(), me = world.rank();
  const auto un = static_cast<std::size_t>(n);
  for (std::size_t extra : {std::size_t{0}, std::size_t{3}, std::size_t{40'000}}) {  // up to 200k elements a block
    // Blocks in reverse rank order with a gap of 3 before each: displacements need not follow ranks.
    std::vector<std::size_t> send_counts(un), send_displs(un), recv_counts(un), recv_displs(un);
    std::size_t send_size = 0, recv_size = 0;
    for (int r = n - 1; r >= 0; --r) {
      const auto i = static_cast<std::size_t>(r);
      send_counts[i] = uneven_count(me, r, extra);
      recv_counts[i] = uneven_count(r, me, extra);
      send_displs[i] = send_size + 3;
      recv_displs[i] = recv_size + 3;
      send_size += send_counts[i] + 3;
      recv_size += recv_counts[i] + 3;
    }
    std::vector<double> send(send_size, -1.0), want(recv_size, -2.0);
    for (int r = 0; r < n; ++r) {
      const auto i = static_cast<std::size_t>(r);
      for (std::size_t k = 0; k < send_counts[i]; ++k) send[send_displs[i] + k] = element_of(me, r, k);
      for (std::size_t k = 0; k < recv_counts[i]; ++k) want[recv_displs[i] + k] = element_of(r, me, k);
    }
    for (Communicator* c : tested) {
      INFO(c->backend_description() << ", " << n << " ranks, blocks of up to " << 4 * (1 + extra) << " elements");
      std::vector<double> got(recv_size, -2.0);  // the gaps keep this
      c->alltoallv(std::span<const double>(send), std::span<const std::size_t>(send_counts),
                   std::span<const std::size_t>(send_displs), std::span(got),
                   std::span<const std::size_t>(recv_counts), std::span<const std::size_t>(recv_displs));
      CHECK(mismatches(got, want) == 0);
    }
    // Packed blocks (displacements from the counts), on the ring backend's pairwise exchange.
    std::vector<std::int32_t> packed_send, packed_want;
    for (int r = 0; r < n; ++r)
      for (std::size_t k = 0; k < send_counts[static_cast<std::size_t>(r)]; ++k)
        packed_send.push_back(static_cast<std::int32_t>(element_of(me, r, k) * 64));
    for (int r = 0; r < n; ++r)
      for (std::size_t k = 0; k < recv_counts[static_cast<std::size_t>(r)]; ++k)
        packed_want.push_back(static_cast<std::int32_t>(element_of(r, me, k) * 64));
    std::vector<std::int32_t> packed_got(packed_want.size());
    b.tested[1].alltoallv(std::span<const std::int32_t>(packed_send), std::span<const std::size_t>(send_counts),
                          std::span(packed_got), std::span<const std::size_t>(recv_counts));
    CHECK(packed_got == packed_want);
  }
}

TEST_CASE("alltoall is the transpose of the ranks' blocks, and counts its traffic", "[collectives][alltoall]") {
  Communicator c = comm::runtime().world().with_backend(comm::BackendKind::shm);
  const int n = c.size(), me = c.rank();
  const auto un = static_cast<std::size_t>(n);
  std::vector<float> send(3 * un), got(3 * un);
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = float(100 * me) + float(i);  // block j: 3j, 3j+1, 3j+2
  const comm::TrafficByKind before = c.traffic();
  c.alltoall(std::span<const float>(send), std::span(got));
  for (int r = 0; r < n; ++r)
    for (std::size_t k = 0; k < 3; ++k)
      CHECK(got[3 * static_cast<std::size_t>(r) + k] == float(100 * r) + float(3 * static_cast<std::size_t>(me) + k));
  std::vector<std::size_t> counts(un, 2);
  std::vector<float> v_send(2 * un, 1.0f), v_got(2 * un);
  c.alltoallv(std::span<const float>(v_send), std::span<const std::size_t>(counts), std::span(v_got),
              std::span<const std::size_t>(counts));
  const comm::TrafficByKind step = c.traffic() - before;
  CHECK(step[static_cast<std::size_t>(comm::OpKind::alltoall)].calls == 1);
  CHECK(step[static_cast<std::size_t>(comm::OpKind::alltoall)].bytes == 12.0 * double(n));  // the whole send buffer
  CHECK(step[static_cast<std::size_t>(comm::OpKind::alltoallv)].calls == 1);
  CHECK(step[static_cast<std::size_t>(comm::OpKind::alltoallv)].bytes == 8.0 * double(n));
  const double part = n > 1 ? static_cast<double>(n - 1) / static_cast<double>(n) : 0.0;
  CHECK(comm::bytes_sent_per_rank(step, n) == Approx(part * 20.0 * double(n)));
}

TEST_CASE("the communicator counts its calls and bytes by kind", "[collectives][traffic]") {
  Communicator c = comm::runtime().world().with_backend(comm::BackendKind::ring);
  const auto n = static_cast<std::size_t>(c.size());
  const comm::TrafficByKind before = c.traffic();
  std::vector<float> data(1000), shard(10), gathered(10 * n), all(10 * n);
  c.allreduce(std::span(data));
  c.allreduce_async(std::span(data)).wait();
  c.reduce_scatter(std::span<const float>(all), std::span(shard));
  c.allgather(std::span<const float>(shard), std::span(gathered));
  const comm::TrafficByKind step = c.traffic() - before;
  auto of = [&](comm::OpKind k) { return step[static_cast<std::size_t>(k)]; };
  CHECK(of(comm::OpKind::allreduce).calls == 2);
  CHECK(of(comm::OpKind::allreduce).bytes == 8000);
  CHECK(of(comm::OpKind::reduce_scatter).calls == 1);
  CHECK(of(comm::OpKind::reduce_scatter).bytes == 40.0 * static_cast<double>(n));  // the whole buffer reduced
  CHECK(of(comm::OpKind::allgather).bytes == 40.0 * static_cast<double>(n));
  const double part = n > 1 ? static_cast<double>(n - 1) / static_cast<double>(n) : 0.0;
  CHECK(comm::bytes_sent_per_rank(step, c.size()) == Approx(2 * part * 8000 + 2 * part * 40.0 * double(n)));
  CHECK_THAT(comm::describe(step), Catch::Contains("2 allreduce (0.0 MB)") && Catch::Contains("1 reduce_scatter"));
}

TEST_CASE("point-to-point send and recv deliver in order", "[collectives][p2p]") {
  Communicator& world = comm::runtime().world();
  const int n = world.size();
  if (n < 2) return;  // nothing to exchange with one rank; the other tests cover it
  const int right = (world.rank() + 1) % n;
  const int left = (world.rank() + n - 1) % n;
  std::vector<double> out = {double(world.rank()), 0.5};
  std::vector<double> in(2);
  if (world.rank() % 2 == 0) {
    world.send(std::span<const double>(out), right);
    world.recv(std::span(in), left);
  } else {
    world.recv(std::span(in), left);
    world.send(std::span<const double>(out), right);
  }
  CHECK(in[0] == double(left));
  CHECK(in[1] == 0.5);
}

TEST_CASE("argument mistakes are errors naming the collective", "[collectives][errors]") {
  Communicator& world = comm::runtime().world();
  std::vector<float> a(4), b(3);
  CHECK_THROWS_WITH(world.allreduce(std::span<const float>(a), std::span(b)),
                    Catch::Contains("allreduce") && Catch::Contains("send has 4 elements, recv 3"));
  CHECK_THROWS_WITH(world.broadcast(std::span(a), world.size()), Catch::Contains("root"));
  CHECK_THROWS_WITH(world.allgather(std::span<const float>(a), std::span(b)), Catch::Contains("allgather"));
  CHECK_THROWS_WITH(comm::parse_backend("carrier-pigeon"), Catch::Contains("unknown backend 'carrier-pigeon'"));
  const auto un = static_cast<std::size_t>(world.size());
  std::vector<float> blocks(2 * un + 1), out(2 * un + 1);
  if (un > 1)  // (one rank: any count is one block)
    CHECK_THROWS_WITH(world.alltoall(std::span<const float>(blocks), std::span(out)),
                      Catch::Contains("alltoall") && Catch::Contains("not " + std::to_string(un) + " equal blocks"));
  std::vector<std::size_t> counts(un, 2), displs = comm::packed_displacements(counts), too_few(un - 1);
  CHECK_THROWS_WITH(world.alltoallv(std::span<const float>(blocks), std::span<const std::size_t>(too_few),
                                    std::span<const std::size_t>(displs), std::span(out),
                                    std::span<const std::size_t>(counts), std::span<const std::size_t>(displs)),
                    Catch::Contains("alltoallv") && Catch::Contains("expected one per rank"));
  std::vector<std::size_t> more = counts;  // this rank's own block: 2 sent, 3 expected
  more[static_cast<std::size_t>(world.rank())] = 3;
  std::vector<float> wide(2 * un + 1);
  CHECK_THROWS_WITH(world.alltoallv(std::span<const float>(blocks), std::span<const std::size_t>(counts),
                                    std::span<const std::size_t>(displs), std::span(wide),
                                    std::span<const std::size_t>(more),
                                    std::span<const std::size_t>(comm::packed_displacements(more))),
                    Catch::Contains("sends itself 2 elements but expects 3"));
  std::vector<std::size_t> past = displs;
  past.back() = 2 * un;  // the last block starts 1 before the end and needs 2
  CHECK_THROWS_WITH(world.alltoallv(std::span<const float>(blocks), std::span<const std::size_t>(counts),
                                    std::span<const std::size_t>(displs), std::span(out),
                                    std::span<const std::size_t>(counts), std::span<const std::size_t>(past)),
                    Catch::Contains("recv block " + std::to_string(un - 1)) && Catch::Contains("runs past"));
  CHECK_THROWS_WITH(world.alltoall(std::span<const float>(blocks.data(), 2 * un), std::span(blocks.data() + 1, 2 * un)),
                    Catch::Contains("overlap"));
}
