// Ctrl-C and the launcher's SIGTERM: how a rank tells an interrupt from a failure, and the
// one line rank 0 prints when the user interrupts the job; and, for a program that asks, a
// stop at its next boundary instead (stop_on_signals).
//
// mpiexec passes a Ctrl-C on to every rank as SIGTERM, and also sends SIGTERM when it tears
// the job down because a rank died. The handler looks at the status board: nothing failed
// → a plain interrupt (rank 0 prints the interrupt note, every rank exits with 128 + the
// signal); a rank dead or a watchdog fired → a rank waiting in a collective reports first
// (Watchdog::on_termination_signal). Everything the handler runs is async-signal-safe.
#pragma once
#include <string_view>

#include "comm/watchdog/status_board.hpp"
#include "comm/watchdog/status_exchange.hpp"

namespace comm {

// Installs the SIGINT/SIGTERM/SIGUSR1 handler. When the launcher tears the job down because another
// rank crashed or was killed, a rank waiting in a collective reports before it goes; when
// the user interrupted the job (Ctrl-C), rank 0 prints the interrupt note and all ranks exit
// with 128 + the signal.
void install_termination_report(StatusBoard* board, StatusExchange* exchange);

// Before the status board goes away (shutdown): a signal after this ends the process quietly.
void uninstall_termination_report();

// The one line rank 0 prints if the job is interrupted now, e.g. "interrupted at step 120;
// the last checkpoint (step 100) is in out/train_dp/checkpoint; resume with …". Cheap: call
// it whenever the answer changes.
void set_interrupt_note(std::string_view note);

// A program that can stop cleanly (a trainer: at the end of a step, with a checkpoint) asks
// for that here. From then on the first SIGINT, SIGTERM or SIGUSR1 — nothing having failed —
// no longer ends the process: rank 0 prints "<signal>: <note>", and the program reads
// stop_signal() at its boundaries, agrees with the other ranks where to stop, and ends itself
// (comm::end_program). A second SIGINT or SIGTERM ends the process at once, as without it.
// mpiexec forwards SIGUSR1 as it is; a Ctrl-C reaches the ranks as SIGTERM, with SIGKILL one
// second later (Open MPI's odls_base_sigkill_timeout) — room for a step and a small checkpoint.
void stop_on_signals(std::string_view note);
int stop_signal();  // the signal that asked for the stop, or 0
bool stops_when_asked();

// The signal (SIGTERM, SIGINT) that came while this rank waited in a collective, or 0.
int termination_signal();
// A signal that asked a program to stop (stop_on_signals) and was found to be no failure:
// the wait goes on.
void clear_termination_signal();
// The watchdog says when this rank waits (a signal then is left to it) and when not.
void set_waiting(bool waiting);

// Did the job fail — a rank on this node dead, or a watchdog fired — or is this a plain
// interrupt? Async-signal-safe.
bool job_failed(StatusBoard* board);
// Ends this rank because of a plain interrupt: rank 0 prints the note; the board and the
// other nodes learn that this exit is no failure. Async-signal-safe.
[[noreturn]] void end_interrupted(StatusBoard* board, StatusExchange* exchange, int signal);

}  // namespace comm
