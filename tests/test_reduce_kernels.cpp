// The reduction arithmetic on one process: every operator, every type, wrap-around for integers.
#include <catch2/catch.hpp>

#include <cmath>
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

TEST_CASE("reduce_pair writes a op b into a third buffer, or over either input") {
  const std::vector<float> a = {1.5f, -2.0f, 3.0f}, b = {0.25f, 5.0f, -6.0f};
  std::vector<float> dst(3, 99.0f);
  comm::reduce_pair(dst.data(), a.data(), b.data(), 3, DataType::f32, ReduceOp::sum);
  CHECK(dst == std::vector<float>{1.75f, 3.0f, -3.0f});
  CHECK(a == std::vector<float>{1.5f, -2.0f, 3.0f});  // the inputs are only read
  auto over_a = a, over_b = b;
  comm::reduce_pair(over_a.data(), over_a.data(), b.data(), 3, DataType::f32, ReduceOp::max);
  CHECK(over_a == std::vector<float>{1.5f, 5.0f, 3.0f});
  comm::reduce_pair(over_b.data(), a.data(), over_b.data(), 3, DataType::f32, ReduceOp::min);
  CHECK(over_b == std::vector<float>{0.25f, -2.0f, -6.0f});
  std::vector<comm::bfloat16> wide(2), x = {comm::bfloat16(2.0f), comm::bfloat16(-1.0f)},
                                  y = {comm::bfloat16(3.0f), comm::bfloat16(4.0f)};
  comm::reduce_pair(wide.data(), x.data(), y.data(), 2, DataType::bf16, ReduceOp::prod);
  CHECK(wide == std::vector<comm::bfloat16>{comm::bfloat16(6.0f), comm::bfloat16(-4.0f)});
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

TEST_CASE("bfloat16: a float's top half, rounded to nearest with ties to even; reduced through float") {
  using comm::bfloat16;
  CHECK(bfloat16(1.0f).bits == 0x3f80);
  CHECK(static_cast<float>(bfloat16(-2.5f)) == -2.5f);
  const float ulp = 1.0f / 128;                                              // 7 mantissa bits at 1.0
  CHECK(static_cast<float>(bfloat16(1.0f + ulp / 2)) == 1.0f);               // a tie: to the even neighbour (down)
  CHECK(static_cast<float>(bfloat16(1.0f + 1.5f * ulp)) == 1.0f + 2 * ulp);  // a tie: to the even one (up)
  CHECK(static_cast<float>(bfloat16(1.0f + 0.6f * ulp)) == 1.0f + ulp);      // nearer the upper one
  CHECK(std::isnan(static_cast<float>(bfloat16(std::nanf("")))));
  std::vector<bfloat16> dst = {bfloat16(1.5f), bfloat16(3), bfloat16(-1)};
  const std::vector<bfloat16> src = {bfloat16(2.25f), bfloat16(5), bfloat16(4)};
  comm::reduce_into(dst.data(), src.data(), 3, DataType::bf16, ReduceOp::sum);
  CHECK(dst == std::vector<bfloat16>{bfloat16(3.75f), bfloat16(8), bfloat16(3)});
  comm::finish_average(dst.data(), 3, DataType::bf16, ReduceOp::avg, 2);
  CHECK(dst == std::vector<bfloat16>{bfloat16(1.875f), bfloat16(4), bfloat16(1.5f)});
  comm::reduce_into(dst.data(), src.data(), 3, DataType::bf16, ReduceOp::max);
  CHECK(dst == std::vector<bfloat16>{bfloat16(2.25f), bfloat16(5), bfloat16(4)});
  CHECK(comm::parse_datatype("bf16") == DataType::bf16);
  CHECK(comm::size_of(DataType::bf16) == 2);
}
