// Where a run will write, checked before step 0 rather than at the first checkpoint.
#pragma once
#include <filesystem>
#include <string>

namespace trainers {

// Every place the run will write must be writable before step 0, not at the first checkpoint.
void check_writable(const std::filesystem::path& dir, const std::string& flag);
// A file the run will write (--metrics, --trace): its folder writable, the name not a folder.
void check_output_file(const std::filesystem::path& file, const std::string& flag);

}  // namespace trainers
