#include "parallel/ep/tensor_parallel_folding.hpp"

#include <numeric>

#include "nn/ops.hpp"
#include "parallel/tp/conjugate_ops.hpp"

namespace parallel {

TensorParallelFolding::TensorParallelFolding(std::shared_ptr<nn::TokenDispatcher> experts, comm::Communicator& tp)
    : experts_(std::move(experts)), tp_(tp) {}

std::vector<nn::Tensor> TensorParallelFolding::run_experts(const nn::Tensor& tokens,
                                                          std::span<const std::vector<int32_t>> rows,
                                                          const ExpertFunction& expert) {
  const int64_t W = tp_.size(), r = tp_.rank();
  const nn::Tensor x = copy_to_tensor_parallel(tokens, tp_);  // f: backward sums each rank's share of dx
  // This rank's piece of each expert's rows, and where the piece's outputs go in the stack of
  // every expert's [Σ n_e, C] (expert e's n_e rows from `first[e]`, in slot order).
  std::vector<std::vector<int32_t>> mine(rows.size()), places(rows.size());
  std::vector<int32_t> first(rows.size());
  int32_t stacked = 0;
  for (std::size_t e = 0; e < rows.size(); ++e) {
    const auto n = static_cast<int64_t>(rows[e].size());
    const int64_t lo = r * n / W, hi = (r + 1) * n / W;
    mine[e].assign(rows[e].begin() + lo, rows[e].begin() + hi);
    places[e].resize(static_cast<std::size_t>(hi - lo));
    std::iota(places[e].begin(), places[e].end(), static_cast<int32_t>(stacked + lo));
    first[e] = stacked;
    stacked += static_cast<int32_t>(n);
  }
  const std::vector<nn::Tensor> outputs = experts_->run_experts(x, mine, expert);  // over the ep·tp group
  std::vector<nn::Tensor> results(rows.size());
  if (stacked == 0) return results;  // (the same on every tp rank: the routing is)
  // g: the pieces in their places (a scatter: combine_rows with a gate of 1), summed over tp.
  const nn::Tensor one = nn::Tensor::from(std::vector<float>{1.0f}, {1});
  std::vector<std::vector<int64_t>> gate(rows.size());
  for (std::size_t e = 0; e < rows.size(); ++e) gate[e].assign(places[e].size(), 0);
  const nn::Tensor all = reduce_from_tensor_parallel(nn::combine_rows(outputs, places, one, gate, stacked), tp_);
  for (std::size_t e = 0; e < rows.size(); ++e) {
    if (rows[e].empty()) continue;
    std::vector<int32_t> stack(rows[e].size());
    std::iota(stack.begin(), stack.end(), first[e]);
    results[e] = nn::gather_rows(all, stack);  // [n_e,C]
  }
  return results;
}

}  // namespace parallel
