#include "planning/thresholds.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace planning {
namespace {

double bandwidth(const GroupShape& group, const Machine& m) {
  return group.nodes() == 1 ? m.intra_node.bytes_per_s : m.inter_node.bytes_per_s;
}
std::string link_of(const GroupShape& group) { return group.nodes() == 1 ? "inside a node" : "between nodes"; }

// "communication ≈ 12 % of the compute beside it" from value / threshold (their ratio is compute / communication).
std::string share(double value, double threshold) {
  return fmt::format("{:.0f} % of the compute beside it", 100.0 * threshold / value);
}

}  // namespace

std::vector<Threshold> thresholds(const Workload& w, const Layout& l, const Machine& m) {
  const nn::GPTConfig& c = w.model;
  const Groups g = groups_of(l, m);
  const double F = m.achieved_flops(w.precision), C = c.n_embd;
  // Bytes on the wire, as the time model counts them: nanodist's trainers send activations and
  // gradients in fp32 whatever the products' precision (4); Megatron's in bf16 (2).
  const double bytes = w.implementation == Implementation::megatron ? 2 : 4, gradient_bytes = bytes;
  std::vector<Threshold> out;
  if (l.gradient_group() > 1) {
    const double N = static_cast<double>(l.gradient_group());
    const double n = static_cast<double>(w.global_batch) * c.block_size / N;
    const double at = (N - 1) / N * gradient_bytes * F / (2 * bandwidth(g.dp, m));
    out.push_back({"dp", "tokens a step per replica and cp rank, n", n,
                   fmt::format("(N−1)/N · {}·F/(2β)", gradient_bytes), fmt::format("N = {}", N), at, link_of(g.dp),
                   n >= at ? fmt::format("backward can hide the gradients' traffic ({})", share(n, at))
                           : fmt::format("the gradients' traffic outlasts backward ({})", share(n, at))});
  }
  if (l.tp > 1) {
    const double at = (l.tp - 1) * bytes * F / (9 * bandwidth(g.tp, m));
    out.push_back({"tp", "the width C", C, fmt::format("(t−1) · {}·F/(9β)", bytes), fmt::format("t = {}", l.tp), at,
                   link_of(g.tp),
                   fmt::format("its all-reduces block: {}", share(C, at))});
  }
  if (l.pp > 1) {
    const double M = static_cast<double>(l.micro_batches(w)), p = l.pp, v = l.virtual_stages;
    const double bubble = (p - 1) / (v * M + p - 1);
    out.push_back({"pp", "micro-batches per replica, M", M, "4(p−1)/v", fmt::format("p = {}, v = {}", l.pp, l.virtual_stages),
                   4 * (p - 1) / v, "", fmt::format("the bubble is {:.0f} % of the step", 100 * bubble)});
  }
  if (l.cp > 1) {
    const double positions = static_cast<double>(c.block_size) / l.cp, at = bytes * F / bandwidth(g.cp, m);
    const bool ring = l.cp_attention == CpAttention::ring;
    out.push_back({"cp", "positions per rank, T/c", positions, fmt::format("{}·F/β", bytes), fmt::format("c = {}", l.cp),
                   at, link_of(g.cp),
                   !ring ? fmt::format("Ulysses' all-to-alls block (the ring's hops would take {})", share(positions, at))
                   : positions >= at ? fmt::format("the ring's hops can hide behind attention ({})", share(positions, at))
                                     : fmt::format("the ring's hops outlast attention ({})", share(positions, at))});
  }
  if (c.n_experts > 0 && g.ep.size > 1) {
    const double e = g.ep.size, at = (e - 1) / e * bytes * F / (12 * bandwidth(g.ep, m));
    out.push_back({"ep", "the width C", C, fmt::format("(e−1)/e · {}·F/(12β)", bytes), fmt::format("e = {}", g.ep.size),
                   at, link_of(g.ep), fmt::format("the dispatch blocks: {}", share(C, at))});
  }
  return out;
}

std::vector<std::pair<std::string, double>> step_terms(const StepTime& t) {
  std::vector<std::pair<std::string, double>> terms = {
      {"compute", t.compute}, {"tp", t.tp},         {"cp", t.cp},           {"ep", t.ep},
      {"pp", t.pp},           {"bubble", t.bubble}, {"dp", t.dp_exposed},   {"optimizer", t.optimizer},
      {"time sharing", t.time_sharing}};
  std::erase_if(terms, [](const auto& term) { return term.second <= 0; });
  std::stable_sort(terms.begin(), terms.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return terms;
}

namespace {

std::string duration(double s) {
  if (s < 1e-3) return fmt::format("{:.3g} µs", s * 1e6);
  if (s < 1) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} s", s);
}

}  // namespace

std::vector<std::string> explain(const Workload& w, const Layout& l, const Machine& m) {
  const auto number = [](double x) { return x >= 100 ? fmt::format("{:.0f}", x) : fmt::format("{:.3g}", x); };
  std::vector<std::string> lines = {fmt::format(
      "explain: {} on {}: F = {:.3g} FLOP/s a device ({}), β {:.3g} B/s inside a node, {:.3g} B/s between nodes, {} "
      "bytes a number on the wire ({})",
      l.describe(w), m.name, m.achieved_flops(w.precision), nn::kPrecisionNames[static_cast<std::size_t>(w.precision)],
      m.intra_node.bytes_per_s, m.inter_node.bytes_per_s, w.implementation == Implementation::megatron ? 2 : 4,
      w.implementation == Implementation::megatron ? "Megatron's bf16" : "nanodist's trainers send fp32")};
  for (const Threshold& t : thresholds(w, l, m))
    lines.push_back(fmt::format("  {}  {} = {}; pays from {} = {} ({}{}): ×{:.2g}, {}", t.dimension, t.quantity,
                                number(t.value), t.formula, number(t.threshold), t.given,
                                t.link.empty() ? "" : ", β " + t.link, t.value / t.threshold, t.verdict));
  const StepTime time = step_time(w, l, m);
  std::string terms;
  for (const auto& [name, seconds] : step_terms(time))
    terms += fmt::format("{}{} {}", terms.empty() ? "" : ", ", name, duration(seconds));
  lines.push_back(fmt::format("  the step, {}, is bound by {}: {}", duration(time.total()),
                              step_terms(time).empty() ? "nothing" : step_terms(time).front().first, terms));
  return lines;
}

}  // namespace planning
