// Element types, reduction operators and collective names shared by every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "numeric/bf16.hpp"

namespace comm {

// u8: bytes — what the PyTorch backend moves for types the library has no name for (its
// reductions are uint8's: wrapping sum and product, min, max, the bitwise ops).
enum class DataType : int { f32, f64, i32, i64, bf16, u8 };

// bfloat16 (numeric/bf16.hpp): the one 16-bit float of every layer; reductions widen to float
// and round back.
using numeric::bfloat16;

// band, bor, bxor: bitwise, for the integer types only.
enum class ReduceOp : int { sum, prod, min, max, avg, band, bor, bxor };

// Every operation the watchdog can name. The order is part of the status board's layout.
enum class OpKind : int {
  none,
  allreduce,
  reduce,
  broadcast,
  allgather,
  gather,
  scatter,
  reduce_scatter,
  barrier,
  send,
  recv,
  sendrecv,
  split,
  finalize,
  alltoall,
  alltoallv,
};
inline constexpr std::size_t kOpKinds = static_cast<std::size_t>(OpKind::alltoallv) + 1;

constexpr std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::f32:
      return 4;
    case DataType::f64:
      return 8;
    case DataType::i32:
      return 4;
    case DataType::i64:
      return 8;
    case DataType::bf16:
      return 2;
    case DataType::u8:
      return 1;
  }
  return 0;
}

constexpr std::string_view name_of(DataType t) {
  switch (t) {
    case DataType::f32:
      return "float";
    case DataType::f64:
      return "double";
    case DataType::i32:
      return "int32";
    case DataType::i64:
      return "int64";
    case DataType::bf16:
      return "bf16";
    case DataType::u8:
      return "uint8";
  }
  return "?";
}

constexpr std::string_view name_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::prod:
      return "prod";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::band:
      return "band";
    case ReduceOp::bor:
      return "bor";
    case ReduceOp::bxor:
      return "bxor";
  }
  return "?";
}

constexpr std::string_view name_of(OpKind k) {
  switch (k) {
    case OpKind::none:
      return "none";
    case OpKind::allreduce:
      return "allreduce";
    case OpKind::reduce:
      return "reduce";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::allgather:
      return "allgather";
    case OpKind::gather:
      return "gather";
    case OpKind::scatter:
      return "scatter";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::barrier:
      return "barrier";
    case OpKind::send:
      return "send";
    case OpKind::recv:
      return "recv";
    case OpKind::sendrecv:
      return "sendrecv";
    case OpKind::split:
      return "split";
    case OpKind::finalize:
      return "finalize";
    case OpKind::alltoall:
      return "alltoall";
    case OpKind::alltoallv:
      return "alltoallv";
  }
  return "?";
}

// Is this a collective whose arguments include a reduction operator / a root?
constexpr bool has_reduce_op(OpKind k) {
  return k == OpKind::allreduce || k == OpKind::reduce || k == OpKind::reduce_scatter;
}
constexpr bool has_root(OpKind k) {
  return k == OpKind::reduce || k == OpKind::broadcast || k == OpKind::gather || k == OpKind::scatter;
}

// Maps a C++ element type to its DataType tag: datatype_of<float>() == DataType::f32.
template <class T>
constexpr DataType datatype_of();
template <>
constexpr DataType datatype_of<float>() {
  return DataType::f32;
}
template <>
constexpr DataType datatype_of<double>() {
  return DataType::f64;
}
template <>
constexpr DataType datatype_of<std::int32_t>() {
  return DataType::i32;
}
template <>
constexpr DataType datatype_of<std::int64_t>() {
  return DataType::i64;
}
template <>
constexpr DataType datatype_of<bfloat16>() {
  return DataType::bf16;
}
template <>
constexpr DataType datatype_of<std::uint8_t>() {
  return DataType::u8;
}

// The bitwise operators reduce integers only.
constexpr bool is_bitwise(ReduceOp op) { return op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor; }
constexpr bool is_integer(DataType t) { return t == DataType::i32 || t == DataType::i64 || t == DataType::u8; }

// The address of element `index` of a buffer of `type` at `base`.
inline char* at(void* base, std::size_t index, DataType type) {
  return static_cast<char*>(base) + index * size_of(type);
}
inline const char* at(const void* base, std::size_t index, DataType type) {
  return static_cast<const char*>(base) + index * size_of(type);
}

// Copies `count` elements, unless there is nothing to copy: count 0 (an empty span's buffer
// may be null, which memcpy must not see even for 0 bytes) or `to` is `from` (in place).
inline void copy_elements(void* to, const void* from, std::size_t count, DataType type) {
  if (count > 0 && to != from) std::memcpy(to, from, count * size_of(type));
}

// Parses "sum", "max", ... ; throws comm::Error on anything else.
ReduceOp parse_reduce_op(std::string_view name);
DataType parse_datatype(std::string_view name);

}  // namespace comm
