// The benchmark harness itself: size parsing, nccl-tests' bus-bandwidth factors, buffer
// shapes, and that #wrong counts a planted error.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "comm/error.hpp"

using comm::DataType;

TEST_CASE("message sizes parse as nccl-tests writes them") {
  CHECK(bench::parse_size("8") == 8);
  CHECK(bench::parse_size("1K") == 1024);
  CHECK(bench::parse_size("256M") == 256ull << 20);
  CHECK(bench::parse_size("2g") == 2ull << 30);
  CHECK_THROWS_AS(bench::parse_size("12Q"), comm::Error);
  CHECK_THROWS_AS(bench::parse_size("M"), comm::Error);
  CHECK_THROWS_AS(bench::parse_size(""), comm::Error);
  // Too large for 64 bits, in digits or after the unit: an error, never a wrapped-around size.
  CHECK(bench::parse_size("17179869183G") == 17179869183ull << 30);
  CHECK_THROWS_WITH(bench::parse_size("99999999999999999999999"), Catch::Contains("is too large a message size"));
  CHECK_THROWS_WITH(bench::parse_size("17179869184G"), Catch::Contains("is too large a message size"));
  CHECK_THROWS_WITH(bench::parse_size("17179869185G"), Catch::Contains("is too large a message size"));
  CHECK(bench::format_size(256ull << 20) == "256M");
  CHECK(bench::format_size(1536) == "1.5K");
}

TEST_CASE("the size sweep goes from begin to end by the factor") {
  CHECK(bench::size_sweep(8, 64, 2) == std::vector<std::size_t>{8, 16, 32, 64});
  CHECK(bench::size_sweep(1024, 1024, 2) == std::vector<std::size_t>{1024});
  CHECK_THROWS_AS(bench::size_sweep(64, 8, 2), comm::Error);
  CHECK_THROWS_AS(bench::size_sweep(8, 64, 1), comm::Error);
}

TEST_CASE("bus bandwidth factors are nccl-tests'") {
  CHECK(bench::collective("allreduce").bus_factor(4) == Approx(1.5));  // 2(n-1)/n
  CHECK(bench::collective("allreduce").bus_factor(2) == Approx(1.0));
  CHECK(bench::collective("reduce_scatter").bus_factor(4) == Approx(0.75));  // (n-1)/n
  CHECK(bench::collective("allgather").bus_factor(8) == Approx(0.875));
  CHECK(bench::collective("gather").bus_factor(2) == Approx(0.5));
  CHECK(bench::collective("scatter").bus_factor(4) == Approx(0.75));
  CHECK(bench::collective("broadcast").bus_factor(4) == Approx(1.0));
  CHECK(bench::collective("reduce").bus_factor(4) == Approx(1.0));
  CHECK(bench::collective("sendrecv").bus_factor(4) == Approx(1.0));
  CHECK(bench::collective("alltoall").bus_factor(4) == Approx(0.75));  // all but the block a rank keeps
  CHECK_THROWS_AS(bench::collective("alltoallw"), comm::Error);
}

TEST_CASE("buffer shapes: per-rank sizes for allreduce, whole n-block sizes for allgather") {
  auto s = bench::collective("allreduce").shape(1024, DataType::f32, 4, 1, 0);
  CHECK(s.send == 256);
  CHECK(s.recv == 256);
  CHECK(s.reported == 256);
  s = bench::collective("allgather").shape(1000, DataType::f32, 3, 1, 0);  // 250 elements → 83 per rank
  CHECK(s.per_rank == 83);
  CHECK(s.reported == 249);
  CHECK(s.send == 83);
  CHECK(s.recv == 249);
  s = bench::collective("scatter").shape(1024, DataType::f64, 4, 2, 0);  // a non-root sends nothing
  CHECK(s.send == 0);
  CHECK(s.recv == 32);
  s = bench::collective("reduce").shape(1024, DataType::i64, 4, 3, 0);  // a non-root receives nothing
  CHECK(s.recv == 0);
}

namespace {
// What rank `rank` of `ranks` should hold after `op`, built from the inputs by hand.
template <class T>
std::vector<T> textbook(const bench::Case& c, int rank, int ranks, std::size_t per_rank) {
  std::vector<T> out;
  const std::string op = c.collective->name;
  if (op == "allreduce") {
    for (std::size_t i = 0; i < per_rank; ++i) {
      T sum = 0;
      for (int q = 0; q < ranks; ++q) sum += bench::input<T>(q, i, c.op);
      out.push_back(sum);
    }
  } else if (op == "allgather") {
    for (int q = 0; q < ranks; ++q)
      for (std::size_t i = 0; i < per_rank; ++i) out.push_back(bench::input<T>(q, i, c.op));
  } else if (op == "reduce_scatter") {
    for (std::size_t i = 0; i < per_rank; ++i) {
      T sum = 0;
      for (int q = 0; q < ranks; ++q) sum += bench::input<T>(q, per_rank * static_cast<std::size_t>(rank) + i, c.op);
      out.push_back(sum);
    }
  }
  return out;
}
}  // namespace

TEST_CASE("#wrong is zero for the right answer and counts each planted error") {
  for (const char* op : {"allreduce", "allgather", "reduce_scatter"}) {
    INFO(op);
    bench::Case c;
    c.collective = &bench::collective(op);
    auto out = textbook<float>(c, 2, 4, 37);
    CHECK(bench::count_wrong<float>(c, 2, 4, 37, out) == 0);
    out[5] += 1.0f;
    CHECK(bench::count_wrong<float>(c, 2, 4, 37, out) == 1);
    out[30] = -out[30] - 1;
    CHECK(bench::count_wrong<float>(c, 2, 4, 37, out) == 2);
  }
  bench::Case broadcast;
  broadcast.collective = &bench::collective("broadcast");
  broadcast.root = 1;
  std::vector<std::int64_t> data(10);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = bench::input<std::int64_t>(1, i, broadcast.op);
  CHECK(bench::count_wrong<std::int64_t>(broadcast, 0, 3, 10, data) == 0);
  data[9] = 12345;
  CHECK(bench::count_wrong<std::int64_t>(broadcast, 0, 3, 10, data) == 1);
}

TEST_CASE("each collective's record: its forms, and its arguments as comm/types.hpp says") {
  CHECK(bench::collective_names() == std::vector<std::string>{"allreduce", "reduce", "broadcast", "allgather", "gather",
                                                              "scatter", "reduce_scatter", "alltoall", "sendrecv"});
  for (const char* name : {"allreduce", "reduce", "allgather", "broadcast"}) {
    INFO(name);
    CHECK(bench::collective(name).has_in_place_form());
  }
  for (const char* name : {"gather", "scatter", "reduce_scatter", "alltoall", "sendrecv"}) {
    INFO(name);
    CHECK_FALSE(bench::collective(name).has_in_place_form());
  }
  CHECK_FALSE(bench::collective("broadcast").out_of_place);  // comm's broadcast is in place only
  CHECK(bench::collective("reduce_scatter").uses_reduce_op());
  CHECK_FALSE(bench::collective("reduce_scatter").uses_root());
  CHECK(bench::collective("gather").uses_root());
  CHECK_FALSE(bench::collective("sendrecv").uses_reduce_op());
  // The root alone holds the gathered buffer; everyone sends one block.
  const bench::Shape root = bench::collective("gather").shape(1200, DataType::f32, 3, 0, 0);
  const bench::Shape other = bench::collective("gather").shape(1200, DataType::f32, 3, 1, 0);
  CHECK(root.recv == 300);
  CHECK(other.recv == 0);
  CHECK(other.send == 100);
  // alltoall: every rank sends and receives all n blocks; block b of the result is rank b's for it.
  const bench::Shape all = bench::collective("alltoall").shape(1200, DataType::f32, 3, 1, 0);
  CHECK(all.send == 300);
  CHECK(all.recv == 300);
  CHECK(all.per_rank == 100);
  bench::Case a2a;
  a2a.collective = &bench::collective("alltoall");
  std::vector<float> got(300);
  for (std::size_t i = 0; i < got.size(); ++i) got[i] = bench::input<float>(static_cast<int>(i / 100), 100 + i % 100, a2a.op);
  CHECK(bench::count_wrong<float>(a2a, 1, 3, 100, got) == 0);
  got[250] += 1.0f;
  CHECK(bench::count_wrong<float>(a2a, 1, 3, 100, got) == 1);
}
