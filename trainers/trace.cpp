#include "trainers/trace.hpp"

#include <array>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nn/atomic_file.hpp"

namespace trainers {

Trace::Trace(comm::Communicator& world) : world_(world) {
  world.barrier();
  t0_ = now_s();
}

Trace::~Trace() { set_on(false); }

void Trace::set_on(bool on) {
  on_ = on;
  if (on)
    nn::timeline::install(this);
  else if (nn::timeline::installed() == this)  // (another's recorder stays)
    nn::timeline::install(nullptr);
}

namespace {
// A rank's communication row is thread id kCommunicationRow + rank (scripts/plot_trace.py
// draws it under the rank's own row).
constexpr int kCommunicationRow = 10000;
}  // namespace

void Trace::add(const std::string& name, const std::string& cat, double start_s, double end_s, Row row) {
  if (on_) spans_.push_back({name, cat, start_s, end_s, row});
}

void Trace::write(const std::string& path, const std::vector<std::string>& row_names) {
  // This rank's events as JSON text; rank 0 collects the texts (a length, then the bytes).
  nlohmann::json events = nlohmann::json::array();
  static const std::map<std::string, std::string> colour = {{"forward", "thread_state_running"},
                                                            {"backward", "rail_response"},
                                                            {"wait", "grey"},
                                                            {"comm", "olive"},
                                                            {"optimizer", "yellow"},
                                                            {"eval", "white"},
                                                            {"attention", "bad"},
                                                            {"experts", "terrible"},
                                                            {"exchange", "rail_animation"}};
  const auto row_name = [&](int r) {
    return r < static_cast<int>(row_names.size()) ? row_names[static_cast<std::size_t>(r)] : fmt::format("rank {}", r);
  };
  bool communication_row = false;
  for (const Span& s : spans_) {
    communication_row = communication_row || s.row == Row::communication;
    events.push_back({{"name", s.name},
                      {"cat", s.cat},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", s.row == Row::rank ? world_.rank() : kCommunicationRow + world_.rank()},
                      {"ts", (s.start - t0_) * 1e6},
                      {"dur", (s.end - s.start) * 1e6},
                      {"cname", colour.count(s.cat) ? colour.at(s.cat) : "generic_work"}});
  }
  if (communication_row)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", kCommunicationRow + world_.rank()},
                      {"args", {{"name", row_name(world_.rank()) + " · communication"}}}});
  const std::string mine = events.dump();
  std::vector<int64_t> sizes(static_cast<std::size_t>(world_.size()));
  const std::array<int64_t, 1> my_size{static_cast<int64_t>(mine.size())};
  world_.allgather(std::span<const int64_t>(my_size), std::span<int64_t>(sizes));
  if (world_.rank() != 0) {
    std::vector<int32_t> chars(mine.begin(), mine.end());
    world_.send(std::span<const int32_t>(chars), 0);
    return;
  }
  nlohmann::json all = {{"traceEvents", nlohmann::json::array()}, {"displayTimeUnit", "ms"}};
  for (int r = 0; r < world_.size(); ++r) {
    std::string text = mine;
    if (r > 0) {
      std::vector<int32_t> chars(static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
      world_.recv(std::span<int32_t>(chars), r);
      text.assign(chars.begin(), chars.end());
    }
    for (auto& e : nlohmann::json::parse(text)) all["traceEvents"].push_back(e);
    all["traceEvents"].push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r}, {"args", {{"name", row_name(r)}}}});
  }
  nn::write_file_atomically(path, all.dump() + "\n");
}

}  // namespace trainers
