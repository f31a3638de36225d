#include "trainers/step_traffic.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace trainers {

StepTraffic::StepTraffic(std::vector<std::pair<std::string, const comm::Communicator*>> groups)
    : groups_(std::move(groups)), at_start_(groups_.size()), total_(groups_.size()) {}

void StepTraffic::step_began() {
  for (std::size_t g = 0; g < groups_.size(); ++g) at_start_[g] = groups_[g].second->traffic();
}

void StepTraffic::step_ended() {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const comm::TrafficByKind step = groups_[g].second->traffic() - at_start_[g];
    for (std::size_t k = 0; k < step.size(); ++k) {
      total_[g][k].calls += step[k].calls;
      total_[g][k].bytes += step[k].bytes;
    }
  }
  ++steps_;
}

std::string StepTraffic::per_step() const {
  const double n = static_cast<double>(std::max<int64_t>(steps_, 1));
  std::string text;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    comm::TrafficByKind mean{};
    for (std::size_t k = 0; k < mean.size(); ++k)
      mean[k] = {std::llround(static_cast<double>(total_[g][k].calls) / n), total_[g][k].bytes / n};
    const bool alone = groups_[g].second->size() == 1;
    text += fmt::format("{}{} group: {}", g ? " · " : "", groups_[g].first,
                        alone ? std::string("one rank, nothing sent") : comm::describe(mean));
  }
  return text;
}

}  // namespace trainers
