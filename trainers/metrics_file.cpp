#include "trainers/metrics_file.hpp"

#include <cmath>

#include <fmt/format.h>

#include "nn/error.hpp"

namespace trainers {

const char* const MetricsFile::kColumns[] = {
    "kind",       "step",        "loss",         "lr",        "grad_norm",    "step_ms",
    "data_ms",    "forward_ms",  "backward_ms",  "comm_ms",   "optimizer_ms", "tokens_per_s",
    "tokens_per_s_per_rank",     "model_flops_per_s",         "train_loss",   "val_loss",
    "val_loss_full",             "elapsed_s",    nullptr};

MetricsFile::MetricsFile(const std::filesystem::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".csv") csv_ = true;
  else if (ext != ".jsonl") nn::fail("--metrics {}: the file name must end in .csv or .jsonl", path.string());
  std::error_code ec;
  const bool fresh = !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) nn::fail("--metrics {}: cannot open for writing", path.string());
  if (csv_ && fresh) {
    for (int i = 0; kColumns[i]; ++i) fmt::print(file_, "{}{}", i ? "," : "", kColumns[i]);
    fmt::print(file_, "\n");
  }
}

MetricsFile::~MetricsFile() {
  if (file_) std::fclose(file_);
}

void MetricsFile::write(const nlohmann::json& record) {
  if (!csv_) {
    fmt::print(file_, "{}\n", record.dump());
  } else {
    for (int i = 0; kColumns[i]; ++i) {
      auto it = record.find(kColumns[i]);
      std::string cell;
      if (it != record.end()) cell = it->is_string() ? it->get<std::string>() : it->dump();
      fmt::print(file_, "{}{}", i ? "," : "", cell);
    }
    fmt::print(file_, "\n");
  }
  std::fflush(file_);
}

std::string format_duration(double seconds) {
  const auto s = static_cast<long>(std::lround(std::max(seconds, 0.0)));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace trainers
