// Asking the other nodes what their status boards say, while the job is stuck.
//
// The status board is shared memory, one per machine: the watchdog reads it to say what
// every rank of its own node is doing. A rank on another machine can only be described by
// that machine. So when the watchdog reports, it asks: a small question goes to every rank
// of every other node that has members of the stuck call, and the first of them to answer
// sends back its whole node's board (read there: pids, /proc, progress) as RankViews.
//
//   node A (reporter)                            node B
//   rank 0: deadline passed ── question ──▶ rank 2: waiting in a collective, listens now and then
//           ◀── rank 2's and rank 3's views ──    (reads B's board: rank 3 is dead / stopped / …)
//
// Who answers: a rank that is waiting in a collective (the watched wait loop listens once
// it has waited 10 ms — nothing is added to a collective that finishes sooner), printing
// its own report, or waiting to be ended. A node where no rank is doing any of those (all
// computing, all stopped or dead, or the node unreachable) gives no answer within the
// budget, and the report says exactly that instead of guessing.
//
// Questions and answers are UDP datagrams, not MPI messages: a question may go to a rank
// that is dead, and OpenMPI asked to send to a dead peer over TCP stalls with a warning
// ("failed to TCP connect") instead of failing the send — the report would never come. A
// datagram to a dead process is simply lost. Each rank opens one socket at start (only when
// the job spans nodes) and the addresses travel once, by MPI_Allgather.
#pragma once

#include <mpi.h>
#include <netinet/in.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/watchdog/status_board.hpp"

namespace comm {

class StatusExchange {
 public:
  StatusExchange(MPI_Comm world, StatusBoard& board);  // collective over `world`
  ~StatusExchange();
  StatusExchange(const StatusExchange&) = delete;
  StatusExchange& operator=(const StatusExchange&) = delete;

  // Does the job run on more than one node?
  bool spans_nodes() const { return node_count_ > 1; }
  bool same_node(int world_rank) const { return node_of_[world_rank] == node_of_[me_]; }
  const std::string& host_of(int world_rank) const { return hosts_[node_of_[world_rank]]; }

  // Answers the requests that have arrived (never blocks). Called from the wait loops.
  void serve();
  // serve() for `seconds`, for a rank that has nothing left to do but be asked.
  void serve_for(double seconds);

  // What their own nodes say of `world_ranks` (those on other nodes), asked about
  // communicator `comm_id`; waits at most `budget_s`, serving others meanwhile. A rank whose
  // node did not answer is absent from the result.
  std::map<int, RankView> ask(const std::vector<int>& world_ranks, std::int64_t comm_id, double budget_s);

  // A Ctrl-C reaches the ranks of each node at a different moment (mpiexec signals its own
  // node first). A rank that ends because of one tells the other nodes, so that their ranks,
  // finding it gone, know it was an interrupt and not a failure. Safe in a signal handler.
  void announce_interrupt() noexcept;
  // Has another node announced an interrupt (seen while serving or asking)?
  bool interrupt_seen() const { return interrupt_seen_; }

 private:
  static constexpr std::size_t kMaxDatagram = 65507;  // the largest UDP payload
  struct Header;                                      // what every datagram starts with (the .cpp)

  // Reads one datagram into buffer_, if any; answers it when it is a question. Returns its
  // header (magic 0: not this job's), or nothing when none was waiting.
  std::optional<Header> receive();
  void answer(const Header& question, const sockaddr_in& asker);

  StatusBoard& board_;
  int me_ = 0;
  int node_count_ = 1;
  std::vector<int> node_of_;        // world rank → node index
  std::vector<std::string> hosts_;  // node index → host name
  int socket_ = -1;                 // UDP, for questions and answers (only when the job spans nodes)
  std::vector<char> endpoints_;     // where each world rank listens (Endpoint, see the .cpp)
  std::uint64_t job_ = 0;           // drawn by rank 0: tells this job's datagrams from others'
  std::vector<char> buffer_;        // the datagram just received, received_ bytes
  ssize_t received_ = 0;
  std::vector<sockaddr_in> notice_targets_;  // every address of every rank on another node
  bool interrupt_seen_ = false;
};

}  // namespace comm
