// The arithmetic of reductions: dst[i] = dst[i] (op) src[i], or dst[i] = a[i] (op) b[i], for
// every type and operator.
// The hand-written algorithms call these after each receive; the mpi backend does not need them.
#pragma once

#include <cstddef>

#include "comm/types.hpp"

namespace comm {

// dst[i] = dst[i] op src[i] for i < count. `avg` accumulates like `sum`; finish_average divides.
void reduce_into(void* dst, const void* src, std::size_t count, DataType type, ReduceOp op);

// dst[i] = a[i] op b[i] for i < count: the first step of a reduction without copying `a` first.
// dst may be a or b itself, not overlap them in part. `avg` like `sum`.
void reduce_pair(void* dst, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op);

// For ReduceOp::avg: data[i] /= ranks (integer division for integer types). No-op for other ops.
void finish_average(void* data, std::size_t count, DataType type, ReduceOp op, int ranks);

}  // namespace comm
