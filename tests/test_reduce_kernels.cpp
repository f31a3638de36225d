// The reduction arithmetic on one process: every operator, every type, wrap-around for integers.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "comm/reduce_kernels.hpp"

using comm::DataType;
using comm::ReduceOp;

TEST_CASE("reduce_into applies each operator elementwise") {
  std::vector<std::int32_t> dst = {1, -2, 3, 7};
  const std::vector<std::int32_t> src = {4, 5, -6, 7};
  auto run = [&](ReduceOp op) {
    auto d = dst;
    comm::reduce_into(d.data(), src.data(), d.size(), DataType::i32, op);
    return d;
  };
  CHECK(run(ReduceOp::sum) == std::vector<std::int32_t>{5, 3, -3, 14});
  CHECK(run(ReduceOp::prod) == std::vector<std::int32_t>{4, -10, -18, 49});
  CHECK(run(ReduceOp::min) == std::vector<std::int32_t>{1, -2, -6, 7});
  CHECK(run(ReduceOp::max) == std::vector<std::int32_t>{4, 5, 3, 7});
}

TEST_CASE("integer sums wrap around as MPI's do, without undefined behaviour") {
  std::vector<std::int64_t> dst = {std::numeric_limits<std::int64_t>::max()};
  const std::vector<std::int64_t> one = {1};
  comm::reduce_into(dst.data(), one.data(), 1, DataType::i64, ReduceOp::sum);
  CHECK(dst[0] == std::numeric_limits<std::int64_t>::min());
}

TEST_CASE("average is a sum divided once by the rank count") {
  std::vector<double> dst = {1.0, 3.0};
  const std::vector<double> src = {2.0, 5.0};
  comm::reduce_into(dst.data(), src.data(), 2, DataType::f64, ReduceOp::avg);
  comm::finish_average(dst.data(), 2, DataType::f64, ReduceOp::avg, 2);
  CHECK(dst == std::vector<double>{1.5, 4.0});
  std::vector<std::int32_t> ints = {7, -7};
  comm::finish_average(ints.data(), 2, DataType::i32, ReduceOp::avg, 2);
  CHECK(ints == std::vector<std::int32_t>{3, -3});  // C++ integer division truncates toward zero
  std::vector<float> untouched = {7.0f};
  comm::finish_average(untouched.data(), 1, DataType::f32, ReduceOp::max, 2);
  CHECK(untouched[0] == 7.0f);
}

TEST_CASE("names parse back to operators and types; anything else is a clear error") {
  CHECK(comm::parse_reduce_op("max") == ReduceOp::max);
  CHECK(comm::parse_datatype("int64") == DataType::i64);
  CHECK_THROWS_WITH(comm::parse_reduce_op("median"), Catch::Contains("unknown reduction operator 'median'"));
  CHECK_THROWS_WITH(comm::parse_datatype("half"), Catch::Contains("unknown element type 'half'"));
}
