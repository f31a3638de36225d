// The trainer's metrics on disk, one record per log line and per evaluation, as CSV (a fixed
// header, empty cells where a record has no value) or JSON Lines — chosen by the extension.
// scripts/plot_loss.py turns either into a loss-curve PNG.
#pragma once
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace trainers {

class MetricsFile {
 public:
  // Appends to `path` (.csv or .jsonl) — a resumed run continues the same file.
  explicit MetricsFile(const std::filesystem::path& path);
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
