#include "nn/timeline.hpp"

#include <chrono>
#include <utility>

namespace nn::timeline {
namespace {
thread_local Recorder* current = nullptr;
}  // namespace

void install(Recorder* recorder) { current = recorder; }

Recorder* installed() { return current; }

bool recording() { return current != nullptr; }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void record(const std::string& name, const char* category, double start_s, double end_s, Row row) {
  if (current) current->record(name, category, start_s, end_s, row);
}

Span::Span(std::string name, const char* category) : category_(category), recorder_(current) {
  if (!recorder_) return;
  name_ = std::move(name);
  start_s_ = now_s();
}

Span::~Span() {
  if (recorder_ && recorder_ == current) recorder_->record(name_, category_, start_s_, now_s(), Row::rank);
}

}  // namespace nn::timeline
