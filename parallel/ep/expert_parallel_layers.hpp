// Expert parallelism as the token dispatcher of nn::GPT (nn/gpt_layers.hpp): the same one
// GPT, whose mixture blocks (nn/moe_mlp.hpp) hold E/ep of their E experts on each rank of the
// expert-parallel group — rank r experts [r·E/ep, (r+1)·E/ep) — and send every routed token to
// the rank holding its expert and the expert's output back (GShard; Megatron core's all-to-all
// token dispatcher; DeepSpeed-MoE). The weights and the sequence are the other layers' concern.
//
// The ep group is carved from the data-parallel ranks (DeepSpeed-MoE): each rank routes its own
// sequences; the group's ranks hold different experts and the same everything else.
//
//   route (each rank, its own tokens)   rows[e]: the token rows that chose expert e, slot order
//   counts    alltoall                  how many rows each rank sends each of my experts
//   dispatch  exchange_rows             rows in expert order = destination order (contiguous
//                                       ranges): [N_sent,C] → [N_received,C], from rank i's block
//   experts   each held expert on its rows from every rank, in rank order — the order one
//             process with the whole batch would stack them, so the outputs and the gradient
//             sums come out alike whatever ep is
//   combine   exchange_rows back        each output to the rank its token lives on
//
// The exchanges are collectives over the ep group in every forward (training, evaluation and
// sampling alike) and again in backward: every rank of the group runs the same blocks the same
// number of times (trainers keep evaluation and sampling in step).
#pragma once
#include <cstdint>
#include <memory>
#include <utility>

#include "comm/communicator.hpp"
#include "nn/gpt_layers.hpp"

namespace parallel {

class ExpertParallelDispatcher final : public nn::TokenDispatcher {
 public:
  // `skip_dispatch_at_step` (testing, train_3d --skip-dispatch-at-step; -1: never): at that step
  // this rank runs only its own experts on its own rows and drops the rest, as a rank that skips
  // the dispatch would; its peers wait for it, and the watchdog names it.
  explicit ExpertParallelDispatcher(comm::Communicator& ep, int64_t skip_dispatch_at_step = -1);

  bool holds_expert(int expert, int n_experts) const override;
  std::vector<nn::Tensor> run_experts(const nn::Tensor& tokens, std::span<const std::vector<int32_t>> rows,
                                      const ExpertFunction& expert) override;
  // Experts are this rank's share of the group's: Σ g² of them summed over the ep group.
  double sum_over_holders(double mine) const override;

  // The trainer's step, for the testing fault above.
  void begin_step(int64_t step) { skip_dispatch_ = step == skip_dispatch_at_step_; }
  // The time in the dispatch's exchanges (the counts', the rows' there and back, forward and
  // backward) since the last call: the training log's "expert dispatch" line.
  double take_dispatch_seconds() { return std::exchange(dispatch_seconds_, 0.0); }

 private:
  comm::Communicator& ep_;
  int64_t skip_dispatch_at_step_;
  bool skip_dispatch_ = false;
  double dispatch_seconds_ = 0.0;
};

// A dispatcher over `ep`, or null when ep has one rank (each expert runs where its tokens are).
std::shared_ptr<ExpertParallelDispatcher> with_expert_parallel(comm::Communicator& ep,
                                                               int64_t skip_dispatch_at_step = -1);

// The first of the n_experts / ep experts that rank `rank` of the ep group holds.
int first_expert(int rank, int n_experts, int ep);

}  // namespace parallel
