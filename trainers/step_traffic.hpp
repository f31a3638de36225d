// What the training steps moved through a rank's communicators, per kind of call: the
// end-of-run line every trainer prints ("communication per training step, rank 0: …"), to
// set beside the formulas in docs/ (a data-parallel step: one allreduce of the gradients; a
// tensor-parallel block: two all-reduces of its activation forward and two backward; …).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"

namespace trainers {

class StepTraffic {
 public:
  // The groups to watch, with the names the line gives them ("tp", "pp", "dp", "world").
  explicit StepTraffic(std::vector<std::pair<std::string, const comm::Communicator*>> groups);
  void step_began();  // before a step
  void step_ended();  // after its update (evaluations and checkpoints in between are not counted)
  // "tp group: 22 allreduce (0.1 MB) · dp group: 1 allreduce (0.2 MB)": the mean per step;
  // a group of one rank says so (its calls are copies, nothing is sent).
  std::string per_step() const;

 private:
  std::vector<std::pair<std::string, const comm::Communicator*>> groups_;
  std::vector<comm::TrafficByKind> at_start_, total_;
  int64_t steps_ = 0;
};

}  // namespace trainers
