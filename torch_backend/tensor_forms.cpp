#include "torch_backend/tensor_forms.hpp"

namespace nanodist_torch {

bool library_has(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kInt || t == at::kLong || t == at::kBFloat16 ||
         t == at::kByte;
}

at::Tensor movable(const at::Tensor& t) {
  at::Tensor flat = t.contiguous().reshape({-1});
  if (library_has(flat.scalar_type())) return flat;
  if (flat.is_complex()) flat = at::view_as_real(flat).reshape({-1});  // (re, im) pairs, then their bytes
  return flat.view(at::kByte);
}

void put_back(const at::Tensor& t, const at::Tensor& moved) {
  if (moved.data_ptr() == t.data_ptr() && moved.nbytes() == t.nbytes() && t.is_contiguous())
    return;  // the library wrote into t itself (maybe as its bytes)
  if (moved.scalar_type() == t.scalar_type()) {
    t.copy_(moved.view(t.sizes()));
    return;
  }
  if (t.is_complex()) {  // bytes → (re, im) pairs → complex
    const auto real = c10::toRealValueType(t.scalar_type());
    t.copy_(at::view_as_complex(moved.view(real).view({-1, 2})).view(t.sizes()));
    return;
  }
  t.copy_(moved.view(t.scalar_type()).view(t.sizes()));  // bytes → the tensor's type
}

at::Tensor joined(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> moved;
  for (const auto& p : parts) moved.push_back(movable(p));
  return at::cat(moved);
}

void split_into(const at::Tensor& whole, const std::vector<at::Tensor>& parts) {
  const std::int64_t block = parts.empty() ? 0 : whole.numel() / static_cast<std::int64_t>(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i)
    put_back(parts[i], whole.narrow(0, static_cast<std::int64_t>(i) * block, block));
}

namespace {

// The type a tensor of type t is reduced in (see the header).
at::ScalarType reduced_as(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return at::kFloat;
    case at::kChar:
    case at::kShort:
      return at::kInt;
    case at::kBool:
      return at::kByte;
    default:
      return t;
  }
}

bool integral(at::ScalarType t) { return at::isIntegralType(t, /*includeBool=*/true); }

}  // namespace

comm::ReduceOp reduction_for(const c10d::ReduceOp& op, at::ScalarType type, const char* call) {
  TORCH_CHECK(!at::isComplexType(type), "nanodist: ", call, " does not reduce complex tensors (", type,
              "); view them as real (torch.view_as_real) to sum them");
  TORCH_CHECK(library_has(reduced_as(type)), "nanodist: ", call, " does not support tensors of type ", type,
              " (it reduces float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8 and bool)");
  const bool boolean = type == at::kBool;  // (bytes of 0 and 1: "or" as max, never a sum that wraps at 256)
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return boolean ? comm::ReduceOp::max : comm::ReduceOp::sum;
    case c10d::ReduceOp::PRODUCT:
      return boolean ? comm::ReduceOp::min : comm::ReduceOp::prod;
    case c10d::ReduceOp::MIN:
      return comm::ReduceOp::min;
    case c10d::ReduceOp::MAX:
      return comm::ReduceOp::max;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!integral(type), "nanodist: ", call, ": ReduceOp.AVG of ", type,
                  " tensors is not defined (AVG is for floating-point types); use SUM and divide");
      return comm::ReduceOp::avg;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(integral(type), "nanodist: ", call, ": the bitwise ReduceOp (BAND, BOR, BXOR) takes integer or "
                  "bool tensors, got ", type);
      return op.op_ == c10d::ReduceOp::BAND ? comm::ReduceOp::band
             : op.op_ == c10d::ReduceOp::BOR ? comm::ReduceOp::bor
                                              : comm::ReduceOp::bxor;
    default:
      TORCH_CHECK(false, "nanodist: ", call, " does not support this ReduceOp (PREMUL_SUM is not built; SUM, AVG, "
                  "PRODUCT, MIN, MAX, BAND, BOR and BXOR are)");
  }
}

at::Tensor reducible(const at::Tensor& t) {
  const at::ScalarType as = reduced_as(t.scalar_type());
  if (t.scalar_type() == at::kBool) return t.contiguous().reshape({-1}).view(at::kByte).clone();  // 0/1 bytes
  if (as == t.scalar_type()) return t.contiguous().reshape({-1});
  return t.contiguous().reshape({-1}).to(as);
}

void put_back_reduced(const at::Tensor& t, const at::Tensor& reduced) {
  if (t.scalar_type() == at::kBool) {
    t.copy_(reduced.ne(0).view(t.sizes()));
    return;
  }
  if (reduced.scalar_type() == t.scalar_type()) return put_back(t, reduced);
  t.copy_(reduced.to(t.scalar_type()).view(t.sizes()));  // (int32 → int8 keeps the low bits: wraps)
}

}  // namespace nanodist_torch
