// What a watchdog report says, as pure functions of what each awaited rank's board shows
// (RankView): where each rank is (Whereabouts), and the one-line diagnosis of who diverged —
// the largest group of ranks taken as the program's path, the others named by what they do
// instead. No MPI and no processes here: the Watchdog gathers the views (its node's board, the
// other nodes' answers) and prints what these return; tests/test_watchdog_diagnosis.cpp feeds
// them views by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/types.hpp"
#include "comm/watchdog/op_call.hpp"
#include "comm/watchdog/status_board.hpp"  // RankView, OpView

namespace comm {

// Where one awaited rank is, as the report sorts them.
enum class Whereabouts { arrived, unknown, interrupted, left, dead, stopped, finished, elsewhere, outside };

struct Awaited {
  int rank = 0;  // in the communicator
  Whereabouts where = Whereabouts::unknown;
  std::string line;        // its report line ("rank 2 is dead: …"); empty when arrived
  std::string other_call;  // elsewhere: the call it waits in ("barrier #1"); left: why it left ("exception: E")
  bool reported = false;   // elsewhere: its own watchdog has fired
};

bool is_point_to_point(OpKind kind);
// "1.5 s"
std::string seconds(std::int64_t ns);
// "count 4 int32, op sum, root 0": the arguments a call of `kind` has.
std::string arguments(OpKind kind, std::int64_t count, DataType type, int op, int root);
// "allreduce #3 on 'world' (count 4 int32, op sum)"
std::string describe(const OpView& call);
// "rank 3", "ranks 0-2, 5"
std::string ranks_phrase(const std::vector<int>& ranks);

// Where communicator rank `rank` (`who`: "rank 2 (world rank 5)", as the report names it) is,
// from its board's `view`, for the call this rank waits in; `ask_budget_s`: how long its node
// was asked (for the line of a rank whose node did not answer).
Awaited where_is(int rank, const std::string& who, const RankView& view, const OpCall& call, double ask_budget_s);
// The awaited ranks that have not arrived.
std::vector<int> missing_ranks(const std::vector<Awaited>& awaited);
// The diagnosis of a collective: the ranks that diverged first, then where the others are.
// `my_call`: "allreduce #3", the call of `my_rank`.
std::string collective_diagnosis(const std::vector<Awaited>& awaited, int my_rank, const std::string& my_call);
// A send or receive waits for one peer (or, from any rank, for all): who waits for whom, and
// what the peer does.
std::string point_to_point_diagnosis(const std::vector<Awaited>& awaited, const OpCall& call,
                                     const std::string& my_call);
// Whether the report found trouble — a rank dead, left, stopped or reporting, or silent unless
// its node announced a Ctrl-C — rather than a plain interrupt.
bool found_trouble(const std::vector<Awaited>& awaited, bool interrupted_elsewhere);

}  // namespace comm
