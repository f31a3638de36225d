#include "nn/ops/row_sums.hpp"

#include <Eigen/Core>

namespace nn {

void add_row_sums(const float* rows_by_cols, int64_t rows, int64_t cols, float* sums) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMajor> matrix(rows_by_cols, rows, cols);
  Eigen::Map<Eigen::RowVectorXf> total(sums, cols);
  total += matrix.colwise().sum();
}

}  // namespace nn
