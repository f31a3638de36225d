// prepare_data: the data step on its own (train_dp runs it too when the data is missing).
//
//   build/trainers/prepare_data [--data-dir data] [--text FILE]
//
// Finds tiny Shakespeare (the given file, the data folder, a download, $NANODIST_DATA_MIRROR),
// builds the character vocabulary and writes train.bin, val.bin and meta.json — always anew,
// replacing the prepared folder as a whole (a stale or broken one included).
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/cli_checks.hpp"
#include "nn/data.hpp"
#include "trainers/text_sources.hpp"

int main(int argc, char** argv) {
  CLI::App app{"prepare_data: tiny Shakespeare → character vocabulary, train.bin, val.bin, meta.json"};
  std::string data_dir = "data", text;
  app.add_option("--data-dir", data_dir, "data folder")->capture_default_str();
  app.add_option("--text", text, "use this text file");
  if (const int status = comm::cli::parse_or_exit_status(app, argc, argv); status >= 0) return status;
  try {
    std::optional<std::filesystem::path> given;
    if (!text.empty()) given = text;
    const nn::TextSource source = nn::find_shakespeare_text(data_dir, given, trainers::text_sources_from_environment());
    const nn::PreparedData data = nn::prepare_char_dataset(source, nn::prepared_dir(data_dir, given));
    fmt::print("text: {} ({})\n", source.path.string(), source.how);
    fmt::print("vocabulary: {} characters\ntrain: {} tokens\nval: {} tokens\nwritten to {}\n", data.vocabulary.size(),
               data.train_tokens, data.val_tokens, data.dir.string());
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
}
