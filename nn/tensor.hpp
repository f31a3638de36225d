// Tensor: float32, contiguous, row-major, with a shape — and, for autograd, a gradient
// buffer of the same size. Copying a Tensor copies a handle (like a PyTorch tensor);
// view() gives another shape over the same values and the same gradient.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nn {

using Shape = std::vector<int64_t>;
std::string shape_string(const Shape& shape);  // "[3, 7, 13]"
int64_t numel_of(const Shape& shape);

// The values and the gradient of one block of memory, shared by a tensor and its views.
struct Storage {
  explicit Storage(std::size_t count);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  std::size_t count;
  float* values;
  float* grad = nullptr;  // allocated (zeroed) on first use
};

class Tensor {
 public:
  Tensor() = default;                                            // an empty handle: defined() is false
  static Tensor empty(Shape shape, bool requires_grad = false);  // uninitialised values
  static Tensor zeros(Shape shape, bool requires_grad = false);
  static Tensor full(Shape shape, float value, bool requires_grad = false);
  static Tensor from(std::span<const float> values, Shape shape, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t size(int dim) const;  // negative counts from the end
  int ndim() const { return static_cast<int>(shape().size()); }
  int64_t numel() const;

  float* data();
  const float* data() const;
  std::span<float> values() { return {data(), static_cast<std::size_t>(numel())}; }
  std::span<const float> values() const { return {data(), static_cast<std::size_t>(numel())}; }
  float item() const;  // the value of a one-element tensor

  // Autograd. grad() allocates a zeroed gradient on first use.
  bool requires_grad() const;
  void set_requires_grad(bool on);
  bool has_grad() const;
  float* grad() const;  // a Tensor is a handle: a const one still reaches its gradient
  // For backward kernels: where to put this tensor's gradient. A gradient buffer allocated
  // here is not zero-filled; `accumulate` is false and the kernel must assign (=) every
  // element instead of adding (+=) — this saves a memset of every activation per step.
  struct GradTarget {
    float* data;
    bool accumulate;
  };
  GradTarget grad_target() const;
  std::span<float> grad_values() const { return {grad(), static_cast<std::size_t>(numel())}; }
  void zero_grad() const;

  // For ZeRO (parallel/zero.*), which holds only a shard of each parameter between uses:
  // give the memory of the values or of the gradient back to the pool, and take values
  // memory again (uninitialised) before the next use. data() is null while freed. Every
  // handle and view sees the change: they share the storage.
  void free_values() const;
  void allocate_values() const;
  bool has_values() const { return impl_->storage->values != nullptr; }
  void free_grad() const;

  Tensor view(Shape shape) const;  // same values and gradient, another shape (same numel)
  Tensor detach() const;           // same values, no gradient tracking
  Tensor clone() const;            // a copy of the values, no gradient

  bool same_storage(const Tensor& other) const;
  // For an op that works row by row over the last dimension: how many rows (all the leading
  // dimensions multiplied). A last dimension of 0 is refused in one line naming `op`.
  int64_t rows_of_last(const char* op) const;

 private:
  struct Impl {
    Shape shape;
    std::shared_ptr<Storage> storage;
    bool requires_grad = false;
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace nn
