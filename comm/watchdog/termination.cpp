#include "comm/watchdog/termination.hpp"

#include "comm/watchdog/abort_hooks.hpp"
#include "comm/watchdog/exit_record.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <ctime>
#include <initializer_list>

namespace comm {
namespace {

std::atomic<StatusBoard*> g_board{nullptr};        // read by the signal handler
volatile std::sig_atomic_t g_terminated = 0;       // the signal (SIGTERM, SIGINT) received while waiting
std::atomic<int> g_waiting{0};  // threads inside wait_all (the program's, the communication thread)
std::atomic<StatusExchange*> g_exchange{nullptr};  // set when the job runs on several nodes
volatile std::sig_atomic_t g_stops_at_boundary = 0;  // the program stops cleanly when asked (stop_on_signals)
volatile std::sig_atomic_t g_stop_signal = 0;        // the signal that asked it to, or 0

// The note rank 0 prints when the user interrupts the job, double-buffered so the signal
// handler always reads a complete one.
constexpr std::size_t kNoteSize = 1024;
char g_notes[2][kNoteSize] = {{0}, {0}};
std::atomic<int> g_note_index{0};

// What rank 0 says when a stop is asked for (stop_on_signals), after the signal's name.
char g_stop_note[kNoteSize] = {0};

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

// One line on stderr, from pieces. On stderr: once mpiexec is ending the job it no longer
// forwards the ranks' stdout (a note written there is lost, tried). It forwards each stream on
// its own, so a step line printed just before the signal can still show after the note.
void write_line(std::initializer_list<const char*> pieces) {
  char line[kNoteSize + 64];
  std::size_t n = 0;
  for (const char* text : pieces)
    while (*text && n < sizeof line - 1) line[n++] = *text++;
  line[n++] = '\n';
  [[maybe_unused]] auto written = write(STDERR_FILENO, line, n);
}

// rank 0's line when the job is interrupted (Ctrl-C): the note the program left, or a
// default. Once.
volatile std::sig_atomic_t g_note_written = 0;
void write_interrupt_note(int signal) {
  if (g_note_written) return;
  g_note_written = 1;
  const char* note = g_notes[g_note_index.load()];
  if (note[0])
    write_line({note});
  else
    write_line({"interrupted (", signal_name(signal), ")"});
}

// A signal from a process other than the launcher (mpiexec or its daemon, this rank's
// parent) or the terminal: someone signalled this rank alone. Named in one line, so that
// the interrupt is not taken for a Ctrl-C of the whole job. Async-signal-safe.
void say_outside_signal(int signal, pid_t sender, bool stopping) {
  char line[160];
  std::size_t n = 0;
  auto put = [&](const char* text) {
    while (*text && n < sizeof line - 1) line[n++] = *text++;
  };
  auto put_number = [&](long value) {
    char digits[24];
    int k = 0;
    do digits[k++] = static_cast<char>('0' + value % 10);
    while ((value /= 10) > 0 && k < 23);
    while (k > 0 && n < sizeof line - 1) line[n++] = digits[--k];
  };
  StatusBoard* board = g_board.load();
  if (board) {
    put("rank ");
    put_number(board->world_rank());
  } else {
    put("a rank");  // the board is already gone (the rank is ending)
  }
  put(" received ");
  put(signal_name(signal));
  put(" from process ");
  put_number(sender);
  put(stopping ? ", not from the launcher: the job stops as asked\n"
               : ", not from the launcher: this rank ends, and with it the job\n");
  [[maybe_unused]] auto written = write(STDERR_FILENO, line, n);
}

}  // namespace

// Only async-signal-safe calls: atomics, kill(), open()/read().
bool job_failed(StatusBoard* board) {
  if (!board) return false;
  if (board->header().aborting_rank.load() >= 0) return true;
  for (int r = 0; r < board->world_size(); ++r) {
    const std::int64_t pid = board->slot(r).pid.load();
    const bool interrupted = board->slot(r).state.load() == static_cast<std::int64_t>(RankState::interrupted);
    if (pid != 0 && !interrupted && !process_alive(pid, board->slot(r).started.load())) return true;
  }
  return false;
}

// Ends this rank because of a plain interrupt: rank 0 prints the note; the board and the
// other nodes learn that this exit is no failure. Async-signal-safe.
void end_interrupted(StatusBoard* board, StatusExchange* exchange, int signal) {
  constexpr auto kInterrupted = static_cast<std::int64_t>(RankState::interrupted);
  if (board) {
    if (board->world_rank() == 0) write_interrupt_note(signal);  // then marked: the others wait for it
    board->mine().state = kInterrupted;
    // The first rank to exit makes Open MPI end the rest at once (SIGKILL): a rank 0 still
    // waiting for a core would lose its note. So the others, beside rank 0 on this node,
    // leave after it has written the note — at most half a second after.
    constexpr int kNoteWaitRounds = 50;                         // × 10 ms: half a second at most
    constexpr timespec kNoteWaitPause{0, 10'000'000};           // 10 ms (nanosleep: safe in a handler)
    if (board->world_rank() != 0 && board->slot(0).pid.load() != 0)
      for (int i = 0; i < kNoteWaitRounds && board->slot(0).state.load() != kInterrupted; ++i)
        nanosleep(&kNoteWaitPause, nullptr);
  }
  if (exchange) exchange->announce_interrupt();
  run_abort_hooks();
  record_exit(128 + signal);
  _exit(128 + signal);
}

namespace {

// SIGINT / SIGTERM (and SIGUSR1 for a program that stops when asked). mpiexec passes a Ctrl-C
// on to every rank as SIGTERM, and also sends SIGTERM when it tears the job down because a
// rank died. The first gets one line from rank 0 (the note), the second the watchdog's report
// from the ranks that were waiting.
void on_termination_signal(int signal, siginfo_t* info, void*) {
  StatusBoard* board = g_board.load();
  const bool failed_here = job_failed(board);
  // The first request, nothing having failed, to a program that stops when asked: it is only
  // recorded; the program stops at its next boundary (stop_signal()).
  const bool stop_asked = g_stops_at_boundary && !g_stop_signal && !failed_here;
  if (info && info->si_code == SI_USER && info->si_pid != 0 && info->si_pid != getppid())
    say_outside_signal(signal, info->si_pid, stop_asked);
  if (stop_asked) {
    g_stop_signal = signal;
    if (board && board->world_rank() == 0) write_line({signal_name(signal), ": ", g_stop_note});
    // On several nodes a signal can also mean that a rank elsewhere failed, which this board
    // cannot see: the next wait asks the other nodes (Watchdog::on_termination_signal) before going on.
    if (g_exchange.load()) g_terminated = signal;
    return;
  }
  if (signal == SIGUSR1 && g_stops_at_boundary) return;  // already stopping, or failing: that goes on
  if (!failed_here && g_waiting && g_exchange.load()) {
    // Nothing failed on this node, but this board cannot see the others: the wait loop asks
    // them before deciding between a report and a quiet exit. Rank 0's note goes out now —
    // the launcher may kill this process before the answers come (its last checkpoint and how
    // to resume are worth saying either way).
    if (board && board->world_rank() == 0) write_interrupt_note(signal);
    g_terminated = signal;
    return;
  }
  if (!failed_here) {
    end_interrupted(board, g_exchange.load(), signal);
  }
  if (!g_waiting) {  // not in a collective: nothing to report, die as usual
    run_abort_hooks();
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_terminated = signal;
}

}  // namespace

void install_termination_report(StatusBoard* board, StatusExchange* exchange) {
  g_board = board;
  g_exchange = exchange && exchange->spans_nodes() ? exchange : nullptr;
  struct sigaction action {};
  action.sa_sigaction = on_termination_signal;
  // SA_SIGINFO: the sender's pid (the launcher, or someone signalling one rank); SA_RESTART:
  // a system call the handler interrupts resumes, as with std::signal.
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);  // a scheduler's warning: before stop_on_signals, as SIGTERM
}

void uninstall_termination_report() {
  g_exchange = nullptr;
  g_board = nullptr;  // what the handler reads is about to go away; a late signal just ends the process
}

void stop_on_signals(std::string_view note) {
  const std::size_t n = std::min(note.size(), kNoteSize - 1);
  std::memcpy(g_stop_note, note.data(), n);
  g_stop_note[n] = '\0';
  g_stops_at_boundary = 1;
}

int stop_signal() { return g_stop_signal; }

bool stops_when_asked() { return g_stops_at_boundary; }

void set_interrupt_note(std::string_view note) {
  const int next = 1 - g_note_index.load();
  const std::size_t n = std::min(note.size(), kNoteSize - 1);
  std::memcpy(g_notes[next], note.data(), n);
  g_notes[next][n] = '\0';
  g_note_index.store(next);
}

int termination_signal() { return g_terminated; }
void clear_termination_signal() { g_terminated = 0; }
void set_waiting(bool waiting) { g_waiting += waiting ? 1 : -1; }

}  // namespace comm
