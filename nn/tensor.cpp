#include "nn/tensor.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "nn/buffer_pool.hpp"
#include "nn/error.hpp"

namespace nn {

std::string shape_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t Tensor::rows_of_last(const char* op) const {
  const int64_t last = size(-1);
  if (last == 0) fail("{}: input {} has an empty last dimension", op, shape_string(shape()));
  return numel() / last;
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail("negative dimension in shape {}", shape_string(shape));
    n *= d;
  }
  return n;
}

Storage::Storage(std::size_t n) : count(n), values(BufferPool::acquire(n)) {}

Storage::~Storage() {
  BufferPool::release(values, count);
  BufferPool::release(grad, count);
}

Tensor Tensor::empty(Shape shape, bool requires_grad) {
  Tensor t;
  int64_t n = numel_of(shape);
  t.impl_ = std::make_shared<Impl>(Impl{std::move(shape), std::make_shared<Storage>(n), requires_grad});
  return t;
}

Tensor Tensor::zeros(Shape shape, bool requires_grad) { return full(std::move(shape), 0.0f, requires_grad); }

Tensor Tensor::full(Shape shape, float value, bool requires_grad) {
  Tensor t = empty(std::move(shape), requires_grad);
  std::fill_n(t.data(), t.numel(), value);
  return t;
}

Tensor Tensor::from(std::span<const float> values, Shape shape, bool requires_grad) {
  if (numel_of(shape) != static_cast<int64_t>(values.size()))
    fail("{} values do not fill shape {}", values.size(), shape_string(shape));
  Tensor t = empty(std::move(shape), requires_grad);
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

const Shape& Tensor::shape() const { return impl_->shape; }

int64_t Tensor::size(int dim) const {
  int n = ndim();
  int d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= n) fail("dimension {} out of range for shape {}", dim, shape_string(shape()));
  return impl_->shape[d];
}

int64_t Tensor::numel() const { return numel_of(impl_->shape); }
float* Tensor::data() { return impl_->storage->values; }
const float* Tensor::data() const { return impl_->storage->values; }

float Tensor::item() const {
  if (numel() != 1) fail("item() of a tensor of shape {}", shape_string(shape()));
  return data()[0];
}

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }
void Tensor::set_requires_grad(bool on) { impl_->requires_grad = on; }
bool Tensor::has_grad() const { return impl_->storage->grad != nullptr; }

float* Tensor::grad() const {
  Storage& s = *impl_->storage;
  if (!s.grad) {
    s.grad = BufferPool::acquire(s.count);
    std::memset(s.grad, 0, s.count * sizeof(float));
  }
  return s.grad;
}

Tensor::GradTarget Tensor::grad_target() const {
  Storage& s = *impl_->storage;
  if (s.grad) return {s.grad, true};
  s.grad = BufferPool::acquire(s.count);
  return {s.grad, false};
}

void Tensor::zero_grad() const {
  Storage& s = *impl_->storage;
  if (s.grad) std::memset(s.grad, 0, s.count * sizeof(float));
}

void Tensor::free_values() const {
  Storage& s = *impl_->storage;
  BufferPool::release(s.values, s.count);
  s.values = nullptr;
}

void Tensor::allocate_values() const {
  Storage& s = *impl_->storage;
  if (!s.values) s.values = BufferPool::acquire(s.count);
}

void Tensor::free_grad() const {
  Storage& s = *impl_->storage;
  BufferPool::release(s.grad, s.count);
  s.grad = nullptr;
}

Tensor Tensor::view(Shape new_shape) const {
  if (numel_of(new_shape) != numel())
    fail("cannot view shape {} as {}", shape_string(shape()), shape_string(new_shape));
  Tensor t;
  t.impl_ = std::make_shared<Impl>(Impl{std::move(new_shape), impl_->storage, impl_->requires_grad});
  return t;
}

Tensor Tensor::detach() const {
  Tensor t;
  t.impl_ = std::make_shared<Impl>(Impl{impl_->shape, impl_->storage, false});
  return t;
}

Tensor Tensor::clone() const { return from(values(), shape()); }

bool Tensor::same_storage(const Tensor& other) const { return impl_->storage == other.impl_->storage; }

}  // namespace nn
