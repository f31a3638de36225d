#include "nn/onednn_gemm.hpp"

#include "nn/error.hpp"

#if defined(NANODIST_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>
#endif

namespace nn {

#if defined(NANODIST_HAVE_ONEDNN)
namespace {

using dnnl::memory;

// Everything that makes one primitive different from another.
using ShapeKey =
    std::tuple<memory::data_type, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;

struct Product {
  dnnl::matmul::primitive_desc description;
  dnnl::matmul primitive;
};

// At most this many primitives are kept, in the shared cache and in each thread's bound set
// (oneDNN's own cache also holds 1024). Training uses a few dozen shapes, but generate() runs
// every sequence length up to block_size, and each primitive holds ~15 KB of JIT code: without
// a bound the cache grows with block_size. A full cache forgets everything and refills with
// the shapes still in use (a few ms once, while those are fewer than 1024). A thread's bound
// set keeps its primitives alive after the shared cache forgets them, so up to
// (threads + 1) × 1024 can be alive at once.
constexpr std::size_t kMaxCachedProducts = 1024;

struct Engine {
  dnnl::engine cpu{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;  // attention calls gemm from inside OpenMP loops: the cache is shared
  // shared: a thread's bound product keeps its primitive alive when the cache forgets it
  std::map<ShapeKey, std::shared_ptr<const Product>> primitives;
};

Engine& engine() {
  static Engine e;
  return e;
}

// The logical matrix [rows, cols] of a row-major one stored with row stride `ld`, or of its
// transpose (stored [cols, rows]): the same memory, read with swapped strides.
memory::desc matrix(memory::data_type type, int64_t rows, int64_t cols, bool transposed, int64_t ld) {
  return memory::desc({rows, cols}, type, transposed ? memory::dims{1, ld} : memory::dims{ld, 1});
}

// C = alpha · op(A) · op(B) + beta · C: alpha is oneDNN's output scale, beta its "sum" post-op.
// The scratchpad (packing buffers) is ours, one per thread: by default oneDNN shares one among
// all primitives, and attention runs products from several threads at once.
std::shared_ptr<const Product> product_for(memory::data_type in, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  const ShapeKey key{in, trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta};
  auto found = e.primitives.find(key);
  if (found != e.primitives.end()) return found->second;
  if (e.primitives.size() >= kMaxCachedProducts) e.primitives.clear();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(beta);
    attr.set_post_ops(sum);
  }
  const dnnl::matmul::desc desc(matrix(in, M, K, trans_a, lda), matrix(in, K, N, trans_b, ldb),
                                matrix(memory::data_type::f32, M, N, false, ldc));
  const dnnl::matmul::primitive_desc description(desc, attr, e.cpu);
  auto made = std::make_shared<const Product>(Product{description, dnnl::matmul(description)});
  return e.primitives.emplace(key, std::move(made)).first->second;
}

// A primitive bound to this thread's memory objects and stream: a call only swaps the data
// pointers in. Building memories, argument maps and a stream on every call cost several µs,
// as much as a whole attention head's 64×64×32 product.
struct BoundProduct {
  std::shared_ptr<const Product> product;
  memory a, b, c, scratchpad;
  std::unordered_map<int, memory> arguments;
};

std::map<ShapeKey, BoundProduct>& this_threads_bound_products() {
  thread_local std::map<ShapeKey, BoundProduct> bound;
  return bound;
}

BoundProduct& bound_product(memory::data_type in, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                            int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  std::map<ShapeKey, BoundProduct>& bound = this_threads_bound_products();
  const ShapeKey key{in, trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta};
  auto found = bound.find(key);
  if (found != bound.end()) return found->second;
  if (bound.size() >= kMaxCachedProducts) bound.clear();  // safe: this thread runs none of them now
  std::shared_ptr<const Product> product = product_for(in, trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta);
  thread_local std::vector<char> scratch;  // sized for the largest product this thread runs
  const memory::desc scratch_desc = product->description.scratchpad_desc();
  if (scratch.size() < scratch_desc.get_size()) {
    scratch.resize(scratch_desc.get_size());
    // the buffer moved: point every bound scratchpad at it
    for (auto& [other_key, other] : bound) other.scratchpad.set_data_handle(scratch.data());
  }
  const dnnl::engine& cpu = engine().cpu;
  memory a(matrix(in, M, K, trans_a, lda), cpu, nullptr), b(matrix(in, K, N, trans_b, ldb), cpu, nullptr),
      c(matrix(memory::data_type::f32, M, N, false, ldc), cpu, nullptr), scratchpad(scratch_desc, cpu, scratch.data());
  BoundProduct entry{std::move(product), a, b, c, scratchpad,
                     {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, scratchpad}}};
  return bound.emplace(key, std::move(entry)).first->second;
}

void run(memory::data_type in, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
         int64_t lda, const void* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = beta · C (oneDNN refuses zero-sized reductions)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = beta == 0.0f ? 0.0f : beta * C[m * ldc + n];
    return;
  }
  try {
    BoundProduct& bound = bound_product(in, trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta);
    thread_local dnnl::stream stream(engine().cpu);
    bound.a.set_data_handle(const_cast<void*>(A));
    bound.b.set_data_handle(const_cast<void*>(B));
    bound.c.set_data_handle(C);
    bound.product->primitive.execute(stream, bound.arguments);
    stream.wait();
  } catch (const dnnl::error& error) {
    fail("oneDNN matmul [{}×{}]·[{}×{}]: {}", M, K, K, N, error.what());
  }
}

}  // namespace

bool onednn_available() { return true; }

std::size_t onednn_cached_products() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.primitives.size();
}

std::size_t onednn_bound_products_on_this_thread() { return this_threads_bound_products().size(); }

// ISAs are bit sets, each containing the ones below it.
static bool onednn_cpu_has(dnnl::cpu_isa wanted) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa()), bits = static_cast<unsigned>(wanted);
  return (isa & bits) == bits;
}
bool onednn_has_avx512() { return onednn_cpu_has(dnnl::cpu_isa::avx512_core); }
bool onednn_has_bf16_units() { return onednn_cpu_has(dnnl::cpu_isa::avx512_core_bf16); }

void onednn_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  run(memory::data_type::f32, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void onednn_gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const numeric::bfloat16* A,
                      int64_t lda, const numeric::bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  run(memory::data_type::bf16, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#else  // built without oneDNN: the other engines serve, and nothing calls these

bool onednn_available() { return false; }
std::size_t onednn_cached_products() { return 0; }
std::size_t onednn_bound_products_on_this_thread() { return 0; }
bool onednn_has_avx512() { return false; }
bool onednn_has_bf16_units() { return false; }
void onednn_gemm_f32(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                     float*, int64_t) {
  fail("nn: this build has no oneDNN (install libdnnl-dev and build again)");
}
void onednn_gemm_bf16(bool, bool, int64_t, int64_t, int64_t, float, const numeric::bfloat16*, int64_t, const numeric::bfloat16*, int64_t,
                      float, float*, int64_t) {
  fail("nn: this build has no oneDNN (install libdnnl-dev and build again)");
}

#endif

}  // namespace nn
