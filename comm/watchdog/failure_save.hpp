// A program's last act when the job fails under it. When a wait ends because a peer is lost
// (or a deadline passed), the rank that reports first on its node runs the program's failure
// save before it exits: a trainer whose ranks each hold the whole state (replicated data
// parallelism) writes the last completed step there, so a restart loses nothing finished
// (nanodist-run, docs/fault_tolerance.md). The save runs under a deadline: past it the rank
// exits anyway, and an unfinished write leaves nothing (checkpoints are written atomically).
//
// The save runs on the thread whose wait failed, while the program's own thread is blocked
// in a collective or computes what that collective waits for — so what it saves is not being
// changed under it (a trainer updates weights only after every wait of the step is over).
#pragma once
#include <functional>

namespace comm {

// Replaces the failure save (an empty function: none). deadline_s > 0.
void set_failure_save(std::function<void()> save, double deadline_s);
// Runs it once, if set, under its deadline (the watchdog calls this; errors are one line).
void run_failure_save();

}  // namespace comm
