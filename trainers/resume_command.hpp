// The command that continues a run, as the user would type it (the interrupt note prints it).
#pragma once
#include <string>

#include "trainers/train_options.hpp"

namespace trainers {

// The command that continues this run, for the interrupt note.
std::string resume_command(const TrainOptions& o, int ranks);
// The launcher's part of the command that started this process ("mpiexec --oversubscribe -n 4",
// shell-quoted), read from the parent process; "" when the parent is not mpiexec/mpirun. Under
// nanodist-run, its own part ("nanodist-run -n 4"), which it passes in NANODIST_RUN_LAUNCHER and
// the program's entry hands in as `run_launcher` (null or empty: not under nanodist-run).
std::string launcher_prefix(const std::string& program, const char* run_launcher);

}  // namespace trainers
