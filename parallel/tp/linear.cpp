#include "parallel/tp/linear.hpp"

#include <algorithm>

#include "nn/ops.hpp"
#include "parallel/tp/conjugate_ops.hpp"

namespace parallel {

nn::Tensor column_parallel_linear(const nn::Tensor& x, const nn::Tensor& weight_rows, const nn::Tensor& bias_rows,
                                  comm::Communicator& tp, nn::Precision precision, const char* family) {
  return nn::linear(copy_to_tensor_parallel(x, tp), weight_rows, bias_rows, family, precision);  // [..., out/T]
}

nn::Tensor row_parallel_linear(const nn::Tensor& x, const nn::Tensor& weight_columns, const nn::Tensor& bias,
                               comm::Communicator& tp, nn::Precision precision, const char* family) {
  // [..., out]: this rank's share of the sum
  nn::Tensor partial = nn::linear(x, weight_columns, {}, family, precision);
  return add_bias_to_sum(reduce_from_tensor_parallel(partial, tp), bias);
}

nn::Tensor add_bias_to_sum(nn::Tensor sum, const nn::Tensor& bias) {
  if (!bias.defined()) return sum;
  nn::Tensor y = nn::add(sum, bias);
  sum.free_values();  // the reduce's and the add's backward read only gradients
  return y;
}

std::vector<float> row_slice(std::span<const float> full, int64_t rows, int64_t columns, int rank, int T, int pieces) {
  const int64_t piece_rows = rows / pieces, mine = piece_rows / T;
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(mine * pieces * columns));
  for (int p = 0; p < pieces; ++p) {
    const float* first = full.data() + (p * piece_rows + rank * mine) * columns;
    out.insert(out.end(), first, first + mine * columns);
  }
  return out;
}

std::vector<float> column_slice(std::span<const float> full, int64_t rows, int64_t columns, int rank, int T) {
  const int64_t mine = columns / T;
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(rows * mine));
  for (int64_t r = 0; r < rows; ++r) {
    const float* first = full.data() + r * columns + rank * mine;
    out.insert(out.end(), first, first + mine);
  }
  return out;
}

}  // namespace parallel
