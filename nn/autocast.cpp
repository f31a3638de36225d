#include "nn/autocast.hpp"

#include <vector>

#include "nn/buffer_pool.hpp"
#include "nn/error.hpp"
#include "nn/profile.hpp"

namespace nn {

namespace {

// The weights cast in this step: the parameter (its handle keeps its storage alive, so no
// other tensor can take its address while the entry lives), where its values were, the cast.
struct CachedCast {
  Tensor weight;
  const float* values;
  Bf16Values cast;
};
struct CastCacheState {
  int scopes = 0;
  std::vector<CachedCast> entries;  // a few dozen parameters: a linear search is enough
  std::size_t casts = 0;
};
CastCacheState g_cache;
}  // namespace

Bf16Buffer::Bf16Buffer(int64_t n)
    : values_(BufferPool::acquire<numeric::bfloat16>(static_cast<std::size_t>(n))), count_(static_cast<std::size_t>(n)) {}
Bf16Buffer::~Bf16Buffer() { BufferPool::release(values_, count_); }

Bf16Values cast_to_bf16(const float* values, int64_t n) {
  profile::Scope scope("bf16 casts", 6.0 * n);  // read fp32, write bf16
  auto cast = std::make_shared<Bf16Buffer>(n);
  numeric::round_to_bf16({values, static_cast<std::size_t>(n)}, {cast->data(), static_cast<std::size_t>(n)});
  return cast;
}

Bf16Values cast_weight_to_bf16(const Tensor& weight) {
  if (g_cache.scopes == 0) return cast_to_bf16(weight.data(), weight.numel());
  // ZeRO-3 frees a parameter's values between uses and gathers them again into new memory:
  // the same storage at another address holds the same values within a step, but a new
  // address is checked anyway — a cast is only reused for exactly the memory it was made from.
  for (const CachedCast& entry : g_cache.entries)
    if (entry.weight.same_storage(weight) && entry.values == weight.data()) return entry.cast;
  ++g_cache.casts;
  g_cache.entries.push_back({weight, weight.data(), cast_to_bf16(weight.data(), weight.numel())});
  return g_cache.entries.back().cast;
}

WeightCastCache::WeightCastCache() { ++g_cache.scopes; }
WeightCastCache::~WeightCastCache() {
  if (--g_cache.scopes == 0) g_cache.entries.clear();
}
std::size_t WeightCastCache::casts_made() { return g_cache.casts; }

}  // namespace nn
