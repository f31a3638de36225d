// What nanodist-run asks a trainer, before it launches and before each restart, instead of
// knowing the layouts itself:
//
//   train_3d --dp 2 --cp 2 --batch-size 8 --layout-query 4:2
//   {"describe":"1 replica(s) of 2 rank(s) (pp 1 × cp 2 × tp 1) × batch 16 in 2 micro-batch(es)",
//    "flags":{"--batch-size":"16","--cp":"2","--cp-attention":"ring","--dp":"1","--ep":"1",
//             "--micro-batches":"2",…},"ok":true,"ranks":2}
//
// The flags are every layout flag of the program (TrainOptions::layout_flags) and the batch's,
// so that a restart pins the whole layout on its command line: --resume then restores nothing
// a shrunk run's checkpoint would get wrong. A flag whose value is "true"/"false" is a switch
// (given or left out); "" leaves the flag out (an even --stage-layers).
//
// FROM:TO: the layout these flags run on FROM ranks, moved to TO ranks with the global batch kept
// (parallel::Layout::on: the model-parallel part as it is, fewer replicas with more each), then
// asked why it cannot run (parallel::Layout::why_not) — so the launcher says the trainer's own
// line. One line of JSON on stdout, exit 0 whatever the answer; nothing else runs (no MPI).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/layout.hpp"
#include "trainers/train_options.hpp"

namespace trainers {

struct LayoutQuery {
  parallel::Layout layout;    // on FROM ranks
  std::string why;            // the trainer's own refusal of FROM ranks, before any layout ("" for none)
  // Layout flags that are no field of parallel::Layout, as they are (train_pp, train_3d: --schedule).
  std::vector<std::pair<std::string, std::string>> fixed_flags;
  int64_t replica_batch = 0;  // sequences a replica takes a step
  // The flags that carry a layout and its batch on the command line (train_dp: --batch-size and
  // --grad-accum; the grid trainers: --dp, --batch-size, --micro-batches).
  std::function<std::vector<std::pair<std::string, std::string>>(const parallel::Layout&, int64_t replica_batch)>
      flags;
  // The restart line's words for a layout and its batch ("2 replicas × micro-batch 4 × 3
  // accumulation step(s)").
  std::function<std::string(const parallel::Layout&, int64_t replica_batch)> describe;
};

// The grid trainers (train_pp, train_3d): the layout flags, --batch-size (a replica's) and
// --micro-batches carry the layout (0 micro-batches: the default that fits it).
LayoutQuery grid_layout_query(parallel::Layout layout, const TrainOptions& o);
// train_dp and train_tp: the layout flags, --batch-size sequences a micro-step, --grad-accum
// micro-steps a step.
LayoutQuery accumulating_layout_query(parallel::Layout layout, const TrainOptions& o);
// The values of those of `flags` that are fields of the layout ("--dp" → "2", "--sequence-parallel" → "true").
std::vector<std::pair<std::string, std::string>> layout_flag_values(const parallel::Layout& l,
                                                                    const std::vector<std::string>& flags);

// The answer for TO ranks (the JSON above; {"ok":false,"why":"…"} when it cannot run, FROM
// ranks included).
nlohmann::json answer_layout_query(const LayoutQuery& query, const TrainOptions& o, int from, int to);

// "4:2" → {4, 2}; throws comm::UsageError on anything else.
std::pair<int, int> parse_layout_query(const std::string& text);

}  // namespace trainers
