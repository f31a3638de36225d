// --trace FILE: a timeline of the first steps, one row per rank, as Chrome-trace JSON
// (open it in ui.perfetto.dev or chrome://tracing; scripts/plot_trace.py draws it as a PNG).
// Each rank records spans (forward, backward, waits in send/recv, gradient communication,
// the optimizer step; in train_dp a second row with each bucket's allreduce) with times from a common start; at the end rank 0 gathers and writes
// them. Times are comparable across ranks on one machine (one clock).
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "trainers/run_setup.hpp"

namespace trainers {

class Trace {
 public:
  // Recording is on while `on` (the run asked for --trace and the step is within the first ones).
  explicit Trace(comm::Communicator& world);  // a barrier: every rank's clock starts together
  bool on = false;
  // Which row of a rank a span goes on: its own thread's, or a second one below it for the
  // communication that runs beside it (a bucket's allreduce during backward).
  enum class Row { rank, communication };
  // A span from `start` to `end` (seconds on the steady clock) in category `cat`
  // (forward, backward, wait, comm, optimizer, eval).
  void add(const std::string& name, const std::string& cat, double start_s, double end_s, Row row = Row::rank);
  static double now_s();
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
  double t0_;
  std::vector<Span> spans_;
};

}  // namespace trainers
