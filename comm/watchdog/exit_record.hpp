// What a launcher reads to judge a job (nanodist-run). Under `mpiexec --enable-recovery` the
// other ranks live on when one is killed, and mpiexec then exits 0 whatever happened — so
// each rank says for itself. With NANODIST_EXIT_RECORDS=<dir> set, rank R keeps <dir>/rank<R>:
//
//   started <host> <pid>       written when MPI starts
//   exit <status>              appended on every way out a rank can still speak: the end of
//                              run(), bad flags (2), an error (1), the watchdog (3), Ctrl-C (130)
//   finalized                  appended once MPI_Finalize has returned (comm::Runtime's end)
//
// "finalized" is this rank's own word that MPI ended cleanly. Open MPI's mpiexec has its own,
// and it can be wrong: a rank's MPI_Finalize waits at most 2 s (PMIx's client timeout) for
// mpiexec to acknowledge it; an mpiexec starved of the CPU for longer (ctest -j4 on 2 cores)
// then sees the rank exit before it has read the rank's finalize, and reports "exited without
// calling finalize" with exit status 1 although the rank finalized. The tests run mpiexec with
// orte_allowed_exit_without_sync (tests/run_command.hpp) and read this line instead.
//
// A rank with "started" and no "exit" was lost: killed (kill -9, the OOM killer), or its host
// went away. Without the variable nothing is written.
#pragma once

namespace comm {

// Called once MPI knows this rank (comm::Runtime), with the variable's value (null or empty:
// no record). A folder that cannot be written is one line on stderr and no record (the job
// itself is not refused for it).
void open_exit_record(const char* dir, int world_rank);
// Appends "exit <status>", the first time only. Async-signal-safe (the Ctrl-C handler's way
// out calls it).
void record_exit(int status);
// Appends "finalized" and closes the record.
void record_finalized();

}  // namespace comm
