// Checks for command-line values that a person can read when they fail.
//
//   app.add_option("--max-iters", n)->check(comm::cli::whole(0));
//   $ train_dp --max-iters -5
//   error: --max-iters must be a whole number ≥ 0, got -5
//
// CLI11's own range checks print the bounds of the C++ type (a 309-digit number for a
// double), call "abc" out of range, and let `nan` through: every float flag here must be a
// finite number, every count a whole number, and the message says which and what was given.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>
#include <limits>
#include <string>

#include "comm/cli_forward.hpp"

namespace comm::cli {

// A whole number in [min, max].
CLI::Validator whole(std::int64_t min, std::int64_t max = std::numeric_limits<int>::max());

// A finite number; `above` excludes the lower bound itself ("> 0"), otherwise "≥ min". The
// default max is a float's largest: the flags hold floats, and CLI11 would take a larger
// value for a stray argument.
CLI::Validator real(double min, double max = std::numeric_limits<float>::max(), bool above = false);
// A finite number > 0 (real with above = true).
CLI::Validator positive_real(double max = std::numeric_limits<float>::max());

// A flag that names one of a few modes, parsed once into its enum: the typed text is checked
// against `names` (indexed by the enum's value) and the enum is set; the rest of the program
// never sees the string again.
//
//   enum class Sampling { random, partition };
//   constexpr std::array<std::string_view, 2> kSamplingNames = {"random", "partition"};
//   comm::cli::add_choice(app, "--sampling", o.sampling, kSamplingNames, "random streams or a partition");
template <class Enum, std::size_t N>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, Enum& target,
                        const std::array<std::string_view, N>& names, const std::string& help);

// The non-template core of add_choice: set(i) with the index of the name typed.
CLI::Option* add_choice_index(CLI::App& app, const std::string& flag, std::vector<std::string> names,
                              std::function<void(std::size_t)> set, std::size_t current, const std::string& help);

template <class Enum, std::size_t N>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, Enum& target,
                        const std::array<std::string_view, N>& names, const std::string& help) {
  return add_choice_index(
      app, flag, std::vector<std::string>(names.begin(), names.end()),
      [&target](std::size_t i) { target = static_cast<Enum>(i); }, static_cast<std::size_t>(target), help);
}

// "--flag: must be …" (CLI11's shape) → "--flag must be …".
std::string readable(const CLI::ParseError& error);

// For a program without comm::Runtime: parses; on --help prints it and returns 0, on a bad
// flag prints one "error: …" line and returns 2; returns -1 when the program should go on.
int parse_or_exit_status(CLI::App& app, int argc, char** argv);

}  // namespace comm::cli
