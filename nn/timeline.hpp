// Spans for --trace from the layers under the trainers: ring attention's blocks and hops,
// Ulysses' all-to-alls, the experts' dispatch and combine. The trainer's Trace
// (trainers/trace.hpp) installs itself as the recorder while it traces, and draws these spans
// inside its forward and backward ones; with no recorder a Span costs a test (and its name:
// callers format one only while recording()).
//
//   { nn::timeline::Span span("dispatch", "exchange");  … the all-to-all … }   // on the rank's row
//   nn::timeline::record("hop 1", "exchange", posted_s, done_s, Row::communication);  // beside it
//
// Only the thread that installed a recorder records (the one that runs the model).
#pragma once
#include <string>

namespace nn::timeline {

// The rank's own row, or the communication row drawn below it (what moves beside the compute).
enum class Row { rank, communication };

class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual void record(const std::string& name, const char* category, double start_s, double end_s, Row row) = 0;
};

// Where this thread's spans go from now on (null: nowhere).
void install(Recorder* recorder);
Recorder* installed();
bool recording();
// The steady clock, in seconds: what every span's times are read from.
double now_s();
void record(const std::string& name, const char* category, double start_s, double end_s, Row row = Row::rank);

// A span on the rank's row from its construction to its end. Categories the pictures know
// (scripts/plot_trace.py): attention, experts, exchange, wait.
class Span {
 public:
  Span(std::string name, const char* category);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  std::string name_;
  const char* category_;
  Recorder* recorder_;  // the one there when the span began: only it gets the span
  double start_s_ = 0;
};

}  // namespace nn::timeline
