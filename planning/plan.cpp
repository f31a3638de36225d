#include "planning/plan.hpp"

#include <algorithm>

namespace planning {
namespace {

std::vector<int> divisors(int64_t n, int64_t at_most) {
  std::vector<int> d;
  for (int64_t k = 1; k <= std::min(n, at_most); ++k)
    if (n % k == 0) d.push_back(static_cast<int>(k));
  return d;
}

template <class T>
std::vector<T> either(const std::optional<T>& fixed, std::vector<T> all) {
  return fixed ? std::vector<T>{*fixed} : all;
}

}  // namespace

PlannedLayout evaluate(const Workload& w, const Layout& layout, const Machine& machine) {
  PlannedLayout p{.layout = layout, .memory = peak_rank_memory(w, layout), .time = step_time(w, layout, machine)};
  const double step = p.time.total();
  // A CPU's ranks share the node's memory; a GPU holds its rank alone.
  p.fits = machine.ranks_share_devices
               ? p.memory.total() * static_cast<double>(layout.ranks()) <=
                     machine.device_memory_bytes * machine.devices_per_node
               : p.memory.total() <= machine.device_memory_bytes;
  p.tokens_per_s = static_cast<double>(w.global_batch) * w.model.block_size / step;
  const double devices = static_cast<double>(
      machine.ranks_share_devices ? std::min<int64_t>(layout.ranks(), machine.devices_per_node) : layout.ranks());
  p.mfu = model_flops_per_step(w) / step / (devices * machine.peak_flops(w.precision));
  return p;
}

std::vector<PlannedLayout> sweep(const Workload& w, const Machine& machine, const LayoutChoices& ch) {
  const auto& c = w.model;
  std::vector<PlannedLayout> all;
  if (ch.tp && (*ch.tp < 1 || *ch.tp > w.devices)) return all;
  if (ch.pp && (*ch.pp < 1 || *ch.pp > w.devices)) return all;
  if (ch.cp && (*ch.cp < 1 || *ch.cp > w.devices)) return all;
  if (ch.ep && (*ch.ep < 1 || *ch.ep > w.devices)) return all;
  for (int tp : either(ch.tp, divisors(w.devices, c.n_head)))
    for (int pp : either(ch.pp, divisors(w.devices / tp, c.n_layer)))
      for (int cp : either(ch.cp, divisors(w.devices / (static_cast<int64_t>(tp) * pp), c.block_size / 2)))
        for (CpAttention attention :
             either(ch.cp_attention, cp > 1 ? std::vector<CpAttention>{CpAttention::ring, CpAttention::ulysses}
                                            : std::vector<CpAttention>{CpAttention::ring})) {
      const int64_t tp_pp_cp = static_cast<int64_t>(tp) * pp * cp;
      if (w.devices % tp_pp_cp != 0) continue;
      const int dp = static_cast<int>(w.devices / tp_pp_cp);
      if (ch.dp && *ch.dp != dp) continue;
      // Expert parallelism: every ep dividing dp and the experts (a mixture only).
      const std::vector<int> eps = c.n_experts > 0 ? divisors(dp, c.n_experts) : std::vector<int>{1};
      for (int ep : either(ch.ep, eps)) {
      std::vector<int> chunks{1};
      if (pp > 1)
        for (int v = 2; v <= 8; ++v)
          if (c.n_layer % (pp * v) == 0) chunks.push_back(v);
      for (int v : either(ch.virtual_stages, chunks))
        for (Schedule schedule :
             either(ch.schedule, std::vector<Schedule>{Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved}))
          for (bool sp : either(ch.sequence_parallel, tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false}))
            // ZeRO: 1-2 on any layout with replicas (train_3d --zero), 3 with pure dp only.
            for (int zero : either(ch.zero, dp * cp == 1 || w.implementation != Implementation::nanodist
                                                ? std::vector<int>{0}
                                            : tp == 1 && pp == 1 && cp == 1 && ep == 1 ? std::vector<int>{0, 1, 2, 3}
                                                                                       : std::vector<int>{0, 1, 2}))
              for (nn::Recompute r : either(ch.recompute, std::vector<nn::Recompute>{nn::Recompute::none, nn::Recompute::selective,
                                                                                     nn::Recompute::full}))
                for (int b : either(ch.micro_batch, divisors(w.global_batch / dp, ch.max_micro_batch))) {
                  const Layout l{.dp = dp, .tp = tp, .pp = pp, .cp = cp, .ep = ep,
                                 .expert_tensor_parallel = ch.expert_tensor_parallel, .cp_attention = attention,
                                 .virtual_stages = v, .schedule = schedule, .sequence_parallel = sp, .zero = zero,
                                 .recompute = r, .micro_batch = b};
                  if (l.impossible(w).empty()) all.push_back(evaluate(w, l, machine));
                }
      }
    }
  // Those that fit, fastest first; then those that do not, closest to fitting first.
  std::stable_sort(all.begin(), all.end(), [](const PlannedLayout& a, const PlannedLayout& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits ? a.time.total() < b.time.total() : a.memory.total() < b.memory.total();
  });
  return all;
}

}  // namespace planning
