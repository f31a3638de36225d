// The trainer's metrics on disk, one record per log line and per evaluation, as CSV (a fixed
// header, empty cells where a record has no value) or JSON Lines — chosen by the extension.
// scripts/plot_loss.py turns either into a loss-curve PNG.
#pragma once
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace trainers {

class MetricsFile {
 public:
  // Opens `path` (.csv or .jsonl). A fresh run (no `resumed_at`) starts a fresh file; a run
  // resumed at step S continues the file of the run it resumes: it keeps that run's rows up
  // to S (log rows with step ≤ S, evaluations before S) and drops the rest, so the file
  // reads as if the run had never stopped.
  MetricsFile(const std::filesystem::path& path, std::optional<int64_t> resumed_at);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  void write(const nlohmann::json& record);  // flushed at once: a killed run keeps its metrics

  static const char* const kColumns[];  // the CSV header, in order

 private:
  std::FILE* file_ = nullptr;
  bool csv_ = false;
};

// "1h02m", "3m05s", "42s".
std::string format_duration(double seconds);

}  // namespace trainers
