// What must happen however the job ends — the watchdog's report, Ctrl-C or the launcher's
// SIGTERM, an error before MPI_Abort. A part of comm/ that leaves something behind (the shm
// backend: segments it is still making, whose names are not yet unlinked) registers a hook
// here; every way out runs the hooks. So the watchdog never needs to know who registered:
// the arrows point down, from the backends to this wing.
//
// The hooks run inside signal handlers: they must be async-signal-safe (no allocation, no
// locks), and so is this table — a fixed array of plain function pointers.
#pragma once

namespace comm {

using AbortHook = void (*)();

// Adds `hook` (a hook added again is kept once); at most kMaxAbortHooks distinct hooks.
void add_abort_hook(AbortHook hook);
// Runs every hook added so far, in the order added.
void run_abort_hooks();

inline constexpr int kMaxAbortHooks = 8;

}  // namespace comm
