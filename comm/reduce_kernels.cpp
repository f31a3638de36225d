#include "comm/reduce_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "comm/error.hpp"

namespace comm {
namespace {

// Integer sum and product wrap around like MPI's do; doing them in unsigned arithmetic
// keeps that well-defined in C++ (signed overflow is undefined behaviour).
template <class T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class T>
T multiply(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// dst = a op b, one loop per (type, op) so the compiler vectorises each (dst may alias a: the
// loops read a[i] and b[i] before writing dst[i]).
template <class T>
void reduce_typed(T* dst, const T* a, const T* b, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      for (std::size_t i = 0; i < n; ++i) dst[i] = add(a[i], b[i]);
      return;
    case ReduceOp::prod:
      for (std::size_t i = 0; i < n; ++i) dst[i] = multiply(a[i], b[i]);
      return;
    case ReduceOp::min:
      for (std::size_t i = 0; i < n; ++i) dst[i] = std::min(a[i], b[i]);
      return;
    case ReduceOp::max:
      for (std::size_t i = 0; i < n; ++i) dst[i] = std::max(a[i], b[i]);
      return;
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor:
      if constexpr (std::is_integral_v<T>) {
        if (op == ReduceOp::band)
          for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(a[i] & b[i]);
        else if (op == ReduceOp::bor)
          for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(a[i] | b[i]);
        else
          for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(a[i] ^ b[i]);
        return;
      }
      fail("the bitwise reduction {} takes integers, not floating-point numbers", name_of(op));
  }
}

// bfloat16: each element through float and rounded back (as GPUs do it).
void reduce_bf16(bfloat16* dst, const bfloat16* a, const bfloat16* b, std::size_t n, ReduceOp op) {
  for (std::size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    float result = 0;
    reduce_typed(&result, &x, &y, 1, op);
    dst[i] = bfloat16(result);
  }
}

template <class T>
void divide_typed(T* data, std::size_t n, int ranks) {
  const T divisor = static_cast<T>(ranks);
  for (std::size_t i = 0; i < n; ++i) data[i] /= divisor;
}

}  // namespace

void reduce_pair(void* dst, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op) {
  switch (type) {
    case DataType::f32:
      return reduce_typed(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b), count,
                          op);
    case DataType::f64:
      return reduce_typed(static_cast<double*>(dst), static_cast<const double*>(a), static_cast<const double*>(b),
                          count, op);
    case DataType::i32:
      return reduce_typed(static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(a),
                          static_cast<const std::int32_t*>(b), count, op);
    case DataType::i64:
      return reduce_typed(static_cast<std::int64_t*>(dst), static_cast<const std::int64_t*>(a),
                          static_cast<const std::int64_t*>(b), count, op);
    case DataType::bf16:
      if (is_bitwise(op)) fail("the bitwise reduction {} takes integers, not bf16", name_of(op));
      return reduce_bf16(static_cast<bfloat16*>(dst), static_cast<const bfloat16*>(a),
                         static_cast<const bfloat16*>(b), count, op);
    case DataType::u8:
      return reduce_typed(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(a),
                          static_cast<const std::uint8_t*>(b), count, op);
  }
}

void reduce_into(void* dst, const void* src, std::size_t count, DataType type, ReduceOp op) {
  reduce_pair(dst, dst, src, count, type, op);
}

void finish_average(void* data, std::size_t count, DataType type, ReduceOp op, int ranks) {
  if (op != ReduceOp::avg) return;
  switch (type) {
    case DataType::f32:
      return divide_typed(static_cast<float*>(data), count, ranks);
    case DataType::f64:
      return divide_typed(static_cast<double*>(data), count, ranks);
    case DataType::i32:
      return divide_typed(static_cast<std::int32_t*>(data), count, ranks);
    case DataType::i64:
      return divide_typed(static_cast<std::int64_t*>(data), count, ranks);
    case DataType::u8:
      return divide_typed(static_cast<std::uint8_t*>(data), count, ranks);
    case DataType::bf16: {
      auto* values = static_cast<bfloat16*>(data);
      for (std::size_t i = 0; i < count; ++i)
        values[i] = bfloat16(static_cast<float>(values[i]) / static_cast<float>(ranks));
      return;
    }
  }
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (auto op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg, ReduceOp::band,
                  ReduceOp::bor, ReduceOp::bxor})
    if (name == name_of(op)) return op;
  fail("unknown reduction operator '{}' (expected sum, prod, min, max, avg, band, bor or bxor)", name);
}

DataType parse_datatype(std::string_view name) {
  for (auto t : {DataType::f32, DataType::f64, DataType::i32, DataType::i64, DataType::bf16, DataType::u8})
    if (name == name_of(t)) return t;
  fail("unknown element type '{}' (expected float, double, int32, int64, bf16 or uint8)", name);
}

}  // namespace comm
