// Σ over the rows of a [rows, cols] matrix, added into a vector [cols]: a bias's gradient.
// One routine for every op that has a bias (linear, bias_gelu), so the fused and the
// separate forms add the same numbers in the same order and give the same bits.
#pragma once
#include <cstdint>

namespace nn {

void add_row_sums(const float* rows_by_cols, int64_t rows, int64_t cols, float* sums);

}  // namespace nn
