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

#include <cstdint>
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

// "--flag: must be …" (CLI11's shape) → "--flag must be …".
std::string readable(const CLI::ParseError& error);

// For a program without comm::Runtime: parses; on --help prints it and returns 0, on a bad
// flag prints one "error: …" line and returns 2; returns -1 when the program should go on.
int parse_or_exit_status(CLI::App& app, int argc, char** argv);

}  // namespace comm::cli
