// What a launcher reads to judge a job (nanodist-run). Under `mpiexec --enable-recovery` the
// other ranks live on when one is killed, and mpiexec then exits 0 whatever happened — so
// each rank says for itself. With NANODIST_EXIT_RECORDS=<dir> set, rank R keeps <dir>/rank<R>:
//
//   started <host> <pid>       written when MPI starts
//   exit <status>              appended on every way out a rank can still speak: the end of
//                              run(), bad flags (2), an error (1), the watchdog (3), Ctrl-C (130)
//
// A rank with "started" and no "exit" was lost: killed (kill -9, the OOM killer), or its host
// went away. Without the variable nothing is written.
#pragma once

namespace comm {

// Called once MPI knows this rank (comm::Runtime), with the variable's value (null or empty:
// no record). A folder that cannot be written is one line on stderr and no record (the job
// itself is not refused for it).
void open_exit_record(const char* dir, int world_rank);
// Appends "exit <status>". Async-signal-safe (the Ctrl-C handler's way out calls it).
void record_exit(int status);

}  // namespace comm
