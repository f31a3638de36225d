// The one way the project mixes numbers into a hash: splitmix64's finaliser (Steele, Lea and
// Flood, "Fast splittable pseudorandom number generators", 2014), and a combine built on it.
// Random streams (nn/rng.hpp), communicator ids (comm/communicator.cpp), call signatures
// (comm/shm/node_group.cpp) and the check mode's parameter digest all use these.
#pragma once
#include <cstdint>
#include <initializer_list>

namespace numeric {

// A bijection on 64-bit words whose every output bit depends on every input bit.
constexpr uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;  // 2⁶⁴/φ: the golden-ratio increment
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// `hash` with `value` folded in; the order of the values matters.
constexpr uint64_t hash_combine(uint64_t hash, uint64_t value) { return mix64(hash ^ mix64(value)); }

// The values folded in order into one hash.
constexpr uint64_t hash_values(std::initializer_list<uint64_t> values) {
  uint64_t hash = 0;
  for (uint64_t v : values) hash = hash_combine(hash, v);
  return hash;
}

}  // namespace numeric
