#include "trainers/metrics_file.hpp"

#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "nn/atomic_file.hpp"
#include "nn/error.hpp"

namespace trainers {

const char* const MetricsFile::kColumns[] = {"kind",
                                             "step",
                                             "loss",
                                             "lr",
                                             "grad_norm",
                                             "step_ms",
                                             "data_ms",
                                             "forward_ms",
                                             "backward_ms",
                                             "comm_ms",
                                             "optimizer_ms",
                                             "tokens_per_s",
                                             "tokens_per_s_per_rank",
                                             "model_flops_per_s",
                                             "train_loss",
                                             "val_loss",
                                             "val_loss_full",
                                             "elapsed_s",
                                             "expert_tokens_min",
                                             "expert_tokens_mean",
                                             "expert_tokens_max",
                                             "dropped_fraction",
                                             "aux_loss",
                                             nullptr};

namespace {

std::string csv_header() {
  std::string header;
  for (int i = 0; MetricsFile::kColumns[i]; ++i) header += fmt::format("{}{}", i ? "," : "", MetricsFile::kColumns[i]);
  return header;
}

// Should a row of the resumed run (its kind and step) stay when resuming at `step`?
bool keep_row(const std::string& kind, int64_t row_step, int64_t step) {
  return kind == "train" ? row_step <= step : row_step < step;
}

// The resumed run's rows that stay, as the text of the file.
std::string rows_before(const std::filesystem::path& path, bool csv, int64_t step) {
  std::ifstream in(path);
  std::string line, kept, padding;
  if (csv) {
    // An older file whose columns are the first of today's (a release added columns at the
    // end): its rows stay, padded with empty fields. Any other layout: start afresh.
    const std::string header = csv_header();
    if (!std::getline(in, line) || !(line == header || header.starts_with(line + ","))) return {};
    for (std::size_t i = line.size(); i < header.size(); ++i)
      if (header[i] == ',') padding += ',';
  }
  while (std::getline(in, line)) {
    std::string kind;
    int64_t row_step = -1;
    try {
      if (csv) {
        const auto comma = line.find(','), next = line.find(',', comma + 1);
        kind = line.substr(0, comma);
        row_step = std::stoll(line.substr(comma + 1, next - comma - 1));
      } else {
        const auto record = nlohmann::json::parse(line);
        kind = record.at("kind").get<std::string>();
        row_step = record.at("step").get<int64_t>();
      }
    } catch (const std::exception&) {
      continue;  // a torn last line of a killed run
    }
    if (keep_row(kind, row_step, step)) kept += line + (csv ? padding : "") + "\n";
  }
  return kept;
}

}  // namespace

MetricsFile::MetricsFile(const std::filesystem::path& path, std::optional<int64_t> resumed_at) {
  const std::string ext = path.extension().string();
  if (ext == ".csv")
    csv_ = true;
  else if (ext != ".jsonl")
    nn::fail("--metrics {}: the file name must end in .csv or .jsonl", path.string());
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::string text = csv_ ? csv_header() + "\n" : std::string();
  if (resumed_at && std::filesystem::exists(path, ec)) {
    const std::string kept = rows_before(path, csv_, *resumed_at);
    text += kept;
  }
  nn::write_file_atomically(path, text);
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) nn::fail("--metrics {}: cannot open for writing", path.string());
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
