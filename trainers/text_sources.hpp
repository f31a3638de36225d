// Where the training text may come from besides the data folder, as the environment says:
// read here, where a program starts (train_*, prepare_data), and handed to nn/data.
//   NANODIST_NO_DOWNLOAD=1     never try the network
//   NANODIST_DATA_MIRROR=DIR   a folder holding tinyshakespeare/input.txt (CI: ../shared/data)
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "nn/data.hpp"

namespace trainers {

inline nn::TextSources text_sources_from_environment() {
  nn::TextSources sources;
  const char* off = std::getenv("NANODIST_NO_DOWNLOAD");
  sources.download = !(off && std::string_view(off) == "1");
  if (const char* mirror = std::getenv(nn::kMirrorVariable); mirror && *mirror)
    sources.mirror = std::filesystem::path(mirror);
  return sources;
}

}  // namespace trainers
