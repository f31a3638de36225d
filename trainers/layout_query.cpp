#include "trainers/layout_query.hpp"

#include <map>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/error.hpp"
#include "trainers/run_setup.hpp"

namespace trainers {

std::vector<std::pair<std::string, std::string>> layout_flag_values(const parallel::Layout& l,
                                                                    const std::vector<std::string>& flags) {
  const std::map<std::string, std::string> values = {
      {"--dp", std::to_string(l.dp)},
      {"--pp", std::to_string(l.pp)},
      {"--cp", std::to_string(l.cp)},
      {"--tp", std::to_string(l.tp)},
      {"--ep", std::to_string(l.ep)},
      {"--cp-attention", std::string(parallel::kCpAttentionNames[static_cast<std::size_t>(l.cp_attention)])},
      {"--sequence-parallel", l.sequence_parallel ? "true" : "false"},
      {"--virtual-stages", std::to_string(l.virtual_stages)},
      {"--stage-layers", fmt::format("{}", fmt::join(l.stage_layers, ","))},
      {"--micro-batches", std::to_string(l.micro_batches)},
      {"--zero", std::to_string(l.zero)}};
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& flag : flags)
    if (auto it = values.find(flag); it != values.end()) out.emplace_back(flag, it->second);
  return out;
}

LayoutQuery grid_layout_query(parallel::Layout layout, const TrainOptions& o) {
  if (layout.micro_batches == 0 && layout.pp >= 1)
    layout.micro_batches = parallel::Layout::default_micro_batches(layout.pp, layout.virtual_stages, o.batch_size);
  return {.layout = layout,
          .why = "",
          .fixed_flags = {},
          .replica_batch = o.batch_size,
          .flags = [flags = o.layout_flags](const parallel::Layout& l,
                                            int64_t batch) -> std::vector<std::pair<std::string, std::string>> {
            auto out = layout_flag_values(l, flags);
            out.emplace_back("--dp", std::to_string(l.dp));
            out.emplace_back("--batch-size", std::to_string(batch));
            out.emplace_back("--micro-batches", std::to_string(l.micro_batches));
            return out;
          },
          .describe = [](const parallel::Layout& l, int64_t batch) {
            return fmt::format("{} replica(s) of {} rank(s) (pp {} × cp {} × tp {}{}) × batch {} in {} micro-batch(es)",
                               l.dp, static_cast<int64_t>(l.pp) * l.cp * l.tp, l.pp, l.cp, l.tp,
                               l.ep > 1 ? fmt::format(", ep {}", l.ep) : "", batch, l.micro_batches);
          }};
}

LayoutQuery accumulating_layout_query(parallel::Layout layout, const TrainOptions& o) {
  layout.micro_batches = o.grad_accum;  // a replica's batch: grad_accum micro-steps of batch_size
  return {.layout = layout,
          .why = "",
          .fixed_flags = {},
          .replica_batch = static_cast<int64_t>(o.batch_size) * o.grad_accum,
          .flags = [flags = o.layout_flags](const parallel::Layout& l,
                                            int64_t batch) -> std::vector<std::pair<std::string, std::string>> {
            auto out = layout_flag_values(l, flags);
            out.emplace_back("--batch-size", std::to_string(batch / l.micro_batches));
            out.emplace_back("--grad-accum", std::to_string(l.micro_batches));
            return out;
          },
          .describe = [](const parallel::Layout& l, int64_t batch) {
            if (l.tp > 1) return fmt::format("{} tensor-parallel ranks, batch {}", l.tp, batch / l.micro_batches);
            return fmt::format("{} replicas × micro-batch {} × {} accumulation step(s)", l.dp, batch / l.micro_batches,
                               l.micro_batches);
          }};
}

nlohmann::json answer_layout_query(const LayoutQuery& query, const TrainOptions& o, int from, int to) {
  const auto refuse = [to](const std::string& why) -> nlohmann::json {
    return {{"ok", false}, {"ranks", to}, {"why", why}};
  };
  if (!query.why.empty()) return refuse(query.why);
  if (std::string why = query.layout.why_not(from); !why.empty()) return refuse(why);  // as launched
  const parallel::Layout::Moved moved = query.layout.on(to, query.replica_batch);
  if (!moved.why.empty()) return refuse(moved.why);
  const nn::ComputeModes modes = compute_modes(o);
  const std::string why = moved.layout.why_not({.model = o.model,
                                                .world_size = to,
                                                .replica_batch = moved.replica_batch,
                                                .precision = modes.precision,
                                                .attention = modes.attention});
  if (!why.empty()) return refuse(why);
  nlohmann::json flags = nlohmann::json::object();
  for (const auto& [flag, value] : query.fixed_flags) flags[flag] = value;
  for (const auto& [flag, value] : query.flags(moved.layout, moved.replica_batch)) flags[flag] = value;
  return {{"ok", true},
          {"ranks", to},
          {"flags", flags},
          {"describe", query.describe(moved.layout, moved.replica_batch)}};
}

std::pair<int, int> parse_layout_query(const std::string& text) {
  std::smatch m;
  if (!std::regex_match(text, m, std::regex(R"((\d{1,9}):(\d{1,9}))")) || std::stoi(m[1]) < 1 || std::stoi(m[2]) < 1)
    throw comm::UsageError(fmt::format("--layout-query {}: give FROM:TO, two rank counts of 1 or more (e.g. 4:2)", text));
  return {std::stoi(m[1]), std::stoi(m[2])};
}

}  // namespace trainers
