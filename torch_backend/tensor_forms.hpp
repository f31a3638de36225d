// How a PyTorch tensor becomes a buffer the library moves or reduces, and back.
//
//   moving (broadcast, gathers, all_to_all, send/recv): the tensor's own bytes, contiguous. A
//     type the library names (float32, float64, bfloat16, int32, int64, uint8) moves as itself;
//     any other (float16, int8, int16, bool, complex…) as its bytes (uint8), so nothing is
//     padded and every byte count is right.
//   reducing (all_reduce, reduce, reduce_scatter): a type the library reduces, as itself; the
//     others widened to one it does — float16 → float32 (summed there, rounded once at the
//     end), int8 and int16 → int32 (wrapping as they would: the low bits of a wrapped int32 sum
//     or product are the wrapped int8 one), bool → uint8 (SUM and MAX are "or", run as max;
//     PRODUCT and MIN "and", run as min).
#pragma once

#include <ATen/ATen.h>

#include <span>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "comm/communicator.hpp"

namespace nanodist_torch {

// The library's element types (each has a comm::DataType).
bool library_has(at::ScalarType t);

// Calls f(T{}) with the C++ type the library uses for tensors of type t (library_has(t)).
template <class F>
void with_element_type(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat:
      return f(float{});
    case at::kDouble:
      return f(double{});
    case at::kInt:
      return f(std::int32_t{});
    case at::kLong:
      return f(std::int64_t{});
    case at::kBFloat16:
      return f(comm::bfloat16{});
    case at::kByte:
      return f(std::uint8_t{});
    default:
      TORCH_CHECK(false, "nanodist: no element type for ", t);
  }
}

template <class T>
std::span<T> span_of(const at::Tensor& t) {
  return {static_cast<T*>(t.data_ptr()), static_cast<std::size_t>(t.numel())};
}

// t as the library moves it: contiguous and flat, of a library type (its bytes otherwise).
at::Tensor movable(const at::Tensor& t);
// Writes what movable(t) (or reducible(t)) gave back into t, where it was a copy.
void put_back(const at::Tensor& t, const at::Tensor& moved);
// `parts` laid end to end in one movable buffer; and one such buffer's blocks back into parts.
at::Tensor joined(const std::vector<at::Tensor>& parts);
void split_into(const at::Tensor& whole, const std::vector<at::Tensor>& parts);

// The reduction of a call, checked against the tensor's type: refused in one line where
// PyTorch's meaning is not defined here (AVG of integers or bool, bitwise ops of floats,
// PREMUL_SUM, complex numbers).
comm::ReduceOp reduction_for(const c10d::ReduceOp& op, at::ScalarType type, const char* call);
// t as the library reduces it (contiguous, flat, maybe widened: see above).
at::Tensor reducible(const at::Tensor& t);
// A reduced buffer back into t: narrowed to t's type (bool: nonzero) and written.
void put_back_reduced(const at::Tensor& t, const at::Tensor& reduced);

}  // namespace nanodist_torch
