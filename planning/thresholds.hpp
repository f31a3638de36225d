// When each dimension pays (docs/thresholds.md): for a layout, each dimension's communication
// set against the compute it runs beside, as a threshold on the one quantity the layout sets —
// the condition "How to Scale Your Model" builds its chapters on. With F a device's achieved
// FLOP/s, β the bandwidth of the link the group's collective crosses (inside a node or
// between nodes) and `bytes` a number's size on the wire (nanodist's trainers send fp32: 4;
// Megatron's implementation bf16: 2):
//
//   dp  tokens a step per replica and cp rank, n   ≥ (N−1)/N · bytes·F/(2β)   backward (4 FLOPs a
//       parameter a token) outlasts the gradients' all-reduce over N = d·c ranks, so it can hide it
//   tp  the width C                                ≥ (t−1) · bytes·F/(9β)    a block's 72·C² FLOPs
//       a token (forward and backward, over t) against its four all-reduces of C numbers
//   pp  micro-batches per replica M                ≥ 4(p−1)/v                the bubble
//       (p−1)/(v·M + p−1) at most a fifth of the step
//   cp  positions per rank T/c                     ≥ bytes·F/β               a ring hop's K and V
//       (2·T/c·C/t numbers) against the causal half of its block's 4·(T/c)²·C/t FLOPs
//   ep  the width C                                ≥ (e−1)/e · bytes·F/(12β)  a token's k experts'
//       48·C² FLOPs (forward and backward) against its rows' four all-to-alls, over the e ranks of
//       one dispatch (tp folded in: e·t)
//
// `nanodist plan --explain` prints them with the step's terms, largest first.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "planning/layout.hpp"
#include "planning/machine.hpp"
#include "planning/time_model.hpp"
#include "planning/workload.hpp"

namespace planning {

struct Threshold {
  std::string dimension;  // dp, tp, pp, cp, ep
  std::string quantity;   // what the layout sets, in words and its symbol
  double value = 0;       // the layout's
  std::string formula;    // the threshold's formula, as the page writes it
  std::string given;      // the layout's degrees in it ("N = 64")
  double threshold = 0;   // its value on this machine
  std::string link;       // the link β is the bandwidth of: "inside a node", "between nodes" (pp: "")
  std::string verdict;    // what the ratio means for this layout, in words
};

// The dimensions this layout uses (degree > 1), in the order dp, tp, pp, cp, ep.
std::vector<Threshold> thresholds(const Workload& w, const Layout& l, const Machine& m);

// The step's terms (compute, tp, cp, ep, pp, bubble, dp exposed, optimizer, time sharing),
// largest first, the zero ones left out: the first bounds the step.
std::vector<std::pair<std::string, double>> step_terms(const StepTime& t);

// The lines `nanodist plan --explain` prints for a layout.
std::vector<std::string> explain(const Workload& w, const Layout& l, const Machine& m);

}  // namespace planning
