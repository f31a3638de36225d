// --trace FILE: a timeline of the first steps, one row per rank, as Chrome-trace JSON
// (open it in ui.perfetto.dev or chrome://tracing; scripts/plot_trace.py draws it as a PNG).
// Each rank records spans (forward, backward, waits in send/recv, gradient communication,
// the optimizer step; in train_dp a second row with each bucket's allreduce) with times from a
// common start; at the end rank 0 gathers and writes them. Times are comparable across ranks on
// one machine (one clock). While it records, the Trace is also nn::timeline's recorder: the
// layers' own spans (ring attention's blocks and hops, Ulysses' all-to-alls, the experts'
// dispatch and combine) land inside the forward and backward ones.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/timeline.hpp"
#include "trainers/run_setup.hpp"

namespace trainers {

class Trace final : public nn::timeline::Recorder {
 public:
  explicit Trace(comm::Communicator& world);  // a barrier: every rank's clock starts together
  ~Trace() override;
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;
  // Records while on (the run asked for --trace and the step is within the first ones).
  void set_on(bool on);
  bool on() const { return on_; }
  // Which row of a rank a span goes on: its own thread's, or a second one below it for the
  // communication that runs beside it (a bucket's allreduce during backward, a ring hop).
  using Row = nn::timeline::Row;
  // A span from `start` to `end` (seconds on the steady clock) in category `cat`
  // (forward, backward, wait, comm, optimizer, eval; the layers': attention, experts, exchange).
  void add(const std::string& name, const std::string& cat, double start_s, double end_s, Row row = Row::rank);
  void record(const std::string& name, const char* category, double start_s, double end_s, Row row) override {
    add(name, category, start_s, end_s, row);
  }
  static double now_s() { return nn::timeline::now_s(); }
  // Gathers every rank's spans on rank 0 and writes the file (atomically). `row_names`
  // labels each rank's row ("rank 2 · stage 2"), indexed by world rank.
  void write(const std::string& path, const std::vector<std::string>& row_names);

 private:
  struct Span {
    std::string name, cat;
    double start, end;
    Row row;
  };
  comm::Communicator& world_;
  bool on_ = false;
  double t0_;
  std::vector<Span> spans_;
};

}  // namespace trainers
