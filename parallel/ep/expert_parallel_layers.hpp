// Expert parallelism as a layers implementation of nn::GPT (nn/gpt_layers.hpp): the same one
// GPT, whose mixture blocks (nn/moe_mlp.hpp) hold E/ep of their E experts on each rank of the
// expert-parallel group — rank r experts [r·E/ep, (r+1)·E/ep) — and send every routed token to
// the rank holding its expert and the expert's output back (GShard; Megatron core's all-to-all
// token dispatcher; DeepSpeed-MoE). Everything else passes through to the inner layers.
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
#include <memory>

#include "comm/communicator.hpp"
#include "nn/gpt_layers.hpp"

namespace parallel {

class ExpertParallelLayers final : public nn::LayersAround {
 public:
  ExpertParallelLayers(std::shared_ptr<nn::GPTLayers> inner, comm::Communicator& ep);

  bool holds_expert(int expert, int n_experts) const override;
  std::vector<nn::Tensor> run_experts(const nn::Tensor& tokens, std::span<const std::vector<int32_t>> rows,
                                      const ExpertFunction& expert) override;
  // Experts are this rank's share of the group's: Σ g² of them summed over the ep group.
  bool is_cut(nn::ParameterRole role) const override { return role == nn::ParameterRole::expert; }
  double sum_over_group(double mine) const override;

  // Testing (train_3d --skip-dispatch-at-step): this rank runs its own experts on its own
  // rows and drops the rest, as a rank that skips the dispatch would; its peers wait for it,
  // and the watchdog names it.
  bool skip_dispatch = false;
  // Where the time of the dispatch's exchanges is added up (the counts', the rows' there and
  // back, forward and backward), or null: the model's RoutingStats::dispatch_seconds.
  double* dispatch_seconds = nullptr;

 private:
  comm::Communicator& ep_;
};

// `inner` under expert parallelism over `ep`, or `inner` itself when ep has one rank.
std::shared_ptr<nn::GPTLayers> with_expert_parallel(std::shared_ptr<nn::GPTLayers> inner, comm::Communicator& ep);

// Which of E experts rank r of an ep group of `ep` holds: [first, first + E/ep).
int first_expert(int rank, int n_experts, int ep);

}  // namespace parallel
