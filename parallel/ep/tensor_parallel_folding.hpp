// Experts beside tensor parallelism, by folding (Megatron core's "MoE parallel folding" with an
// expert tensor parallelism of 1): attention and the dense MLPs are cut over tp as before, but
// the experts are not — the tp ranks join the expert-parallel group instead, so the experts
// spread over ep·tp ranks, E/(ep·tp) whole experts on each (parallel/grid.hpp's ep_group).
//
//   h [N,C]   the stream after ln_2, the same on every tp rank (tp's replicated region)
//   router, routing, combine, balancing loss: on every tp rank alike, over all N tokens (C·E
//             multiply-adds a token: cheap) — so the router's gradient is the same on every tp
//             rank, as any replicated parameter's is, and the routing log is one replica's
//   experts   tp rank r sends only its piece of each expert's rows, the r-th of tp contiguous
//             pieces of rows[e] [⌊r·n/tp⌋, ⌊(r+1)·n/tp⌋), over the ep·tp group (the inner
//             ExpertParallelDispatcher). The group's rank order — dp rank, then tp rank —
//             stacks each expert's rows as one process with the whole batch would
//   gather    each rank's outputs in their places, zeros elsewhere [Σ n_e, C], summed over tp
//             (g: an all-reduce forward, identity backward): every output on every tp rank
//   backward  the rows' gradient: each rank's pieces', summed over tp (f: identity forward, an
//             all-reduce backward) — the conjugate pair of a column-then-row layer (parallel/tp/)
//
// Why fold rather than cut each expert over tp (expert tensor parallelism, ETP): an expert sees
// only about k/E of the batch's tokens, so its GEMMs are small already; cutting them again over
// tp would add an all-reduce of every expert's output and leave each rank a sliver of a GEMM.
// Folding keeps every expert's GEMM whole and moves tokens instead (docs/3d_parallelism.md).
#pragma once
#include <memory>

#include "comm/communicator.hpp"
#include "nn/gpt_layers.hpp"

namespace parallel {

class TensorParallelFolding final : public nn::TokenDispatcher {
 public:
  // `experts`: the dispatcher over the ep·tp group; `tp`: this rank's tensor-parallel group.
  TensorParallelFolding(std::shared_ptr<nn::TokenDispatcher> experts, comm::Communicator& tp);

  bool holds_expert(int expert, int n_experts) const override { return experts_->holds_expert(expert, n_experts); }
  std::vector<nn::Tensor> run_experts(const nn::Tensor& tokens, std::span<const std::vector<int32_t>> rows,
                                      const ExpertFunction& expert) override;
  double sum_over_holders(double mine) const override { return experts_->sum_over_holders(mine); }

 private:
  std::shared_ptr<nn::TokenDispatcher> experts_;
  comm::Communicator& tp_;
};

}  // namespace parallel
