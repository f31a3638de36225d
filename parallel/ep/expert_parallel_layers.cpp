#include "parallel/ep/expert_parallel_layers.hpp"

#include <chrono>
#include <numeric>

#include <fmt/format.h>

#include "comm/error.hpp"
#include "nn/autograd.hpp"
#include "nn/ops.hpp"
#include "nn/timeline.hpp"
#include "parallel/ep/row_exchange.hpp"

namespace parallel {

int first_expert(int rank, int n_experts, int ep) { return rank * (n_experts / ep); }

ExpertParallelDispatcher::ExpertParallelDispatcher(comm::Communicator& ep, int64_t skip_dispatch_at_step)
    : ep_(ep), skip_dispatch_at_step_(skip_dispatch_at_step) {}

bool ExpertParallelDispatcher::holds_expert(int expert, int n_experts) const {
  if (n_experts % ep_.size() != 0)
    comm::fail("expert parallelism: {} experts do not split over {} ranks", n_experts, ep_.size());
  const int first = first_expert(ep_.rank(), n_experts, ep_.size());
  return expert >= first && expert < first + n_experts / ep_.size();
}

double ExpertParallelDispatcher::sum_over_holders(double mine) const {
  ep_.allreduce(std::span<double>(&mine, 1));
  return mine;
}

std::vector<nn::Tensor> ExpertParallelDispatcher::run_experts(const nn::Tensor& tokens,
                                                          std::span<const std::vector<int32_t>> rows,
                                                          const ExpertFunction& expert) {
  const int E = static_cast<int>(rows.size()), W = ep_.size(), per = E / W, first = first_expert(ep_.rank(), E, W);
  const int64_t C = tokens.size(-1);
  if (skip_dispatch_) {  // testing: only the experts held here, on this rank's rows
    std::vector<std::vector<int32_t>> mine(rows.size());
    for (int j = 0; j < per; ++j) mine[first + j] = rows[first + j];
    return nn::LocalDispatcher().run_experts(tokens, mine, expert);
  }
  // Counts: to rank j, how many rows for each of its experts (expert order is rank order).
  std::vector<int64_t> sent_per_expert(static_cast<std::size_t>(E)), received_per_expert(sent_per_expert.size());
  for (int e = 0; e < E; ++e) sent_per_expert[e] = static_cast<int64_t>(rows[e].size());
  // (Timed while training: evaluation's and sampling's forwards record no backward.)
  double* clock = nn::autograd::grad_enabled() ? &dispatch_seconds_ : nullptr;
  const auto start = std::chrono::steady_clock::now();
  {
    nn::timeline::Span span("dispatch's counts", "exchange");
    ep_.alltoall(std::span<const int64_t>(sent_per_expert), std::span<int64_t>(received_per_expert));
  }
  if (clock) *clock += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<int64_t> send_rows(W, 0), recv_rows(W, 0);  // rows to and from each rank
  for (int e = 0; e < E; ++e) {
    send_rows[e / per] += sent_per_expert[e];
    recv_rows[e / per] += received_per_expert[e];  // (block i: rank i's counts for my experts)
  }

  // Dispatch: this rank's rows in expert order, [N_sent,C] → [N_received,C].
  std::vector<int32_t> order;
  for (const auto& r : rows) order.insert(order.end(), r.begin(), r.end());
  const nn::Tensor received = exchange_rows(nn::gather_rows(tokens, order), send_rows, recv_rows, ep_, "dispatch", clock);

  // Each held expert on its rows from every rank, rank by rank; each output row back in its place.
  std::vector<std::vector<int32_t>> places(static_cast<std::size_t>(per));  // expert j's rows of `received`
  int32_t at = 0;
  for (int i = 0; i < W; ++i)
    for (int j = 0; j < per; ++j)
      for (int64_t m = 0; m < received_per_expert[i * per + j]; ++m) places[j].push_back(at++);
  std::vector<nn::Tensor> outputs(static_cast<std::size_t>(per));
  {
    nn::timeline::Span span(!nn::timeline::recording() ? std::string()
                            : per == 1                    ? fmt::format("expert {}: {} rows", first, at)
                                                          : fmt::format("experts {}-{}: {} rows", first, first + per - 1, at),
                            "experts");
    for (int j = 0; j < per; ++j)
      if (!places[j].empty()) outputs[j] = expert(first + j, nn::gather_rows(received, places[j]));  // [M_j,C]
  }
  nn::Tensor answered = nn::Tensor::zeros({received.size(0), C});
  if (at > 0) {  // combine_rows with a gate of 1: a scatter of the outputs into their places
    const nn::Tensor one = nn::Tensor::from(std::vector<float>{1.0f}, {1});
    std::vector<std::vector<int64_t>> gate(places.size());
    for (int j = 0; j < per; ++j) gate[j].assign(places[j].size(), 0);
    answered = nn::combine_rows(outputs, places, one, gate, received.size(0));
  }

  // Combine: the outputs back to the ranks that sent the rows, [N_received,C] → [N_sent,C], in
  // the order they left; expert e's are the next rows[e].size() of them.
  const nn::Tensor back = exchange_rows(answered, recv_rows, send_rows, ep_, "combine", clock);
  std::vector<nn::Tensor> results(rows.size());
  int32_t next = 0;
  for (int e = 0; e < E; ++e) {
    if (rows[e].empty()) continue;
    std::vector<int32_t> mine(rows[e].size());
    std::iota(mine.begin(), mine.end(), next);
    next += static_cast<int32_t>(mine.size());
    results[e] = nn::gather_rows(back, mine);
  }
  return results;
}

std::shared_ptr<ExpertParallelDispatcher> with_expert_parallel(comm::Communicator& ep, int64_t skip_dispatch_at_step) {
  if (ep.size() == 1) return nullptr;
  return std::make_shared<ExpertParallelDispatcher>(ep, skip_dispatch_at_step);
}

}  // namespace parallel
