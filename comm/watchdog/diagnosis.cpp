// The watchdog's diagnosis, as pure functions of what the ranks' boards show (diagnosis.hpp).
#include "comm/watchdog/diagnosis.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace comm {

bool is_point_to_point(OpKind kind) { return kind == OpKind::send || kind == OpKind::recv || kind == OpKind::sendrecv; }

std::string seconds(std::int64_t ns) { return fmt::format("{:.1f} s", static_cast<double>(ns) * 1e-9); }

std::string arguments(OpKind kind, std::int64_t count, DataType type, int op, int root) {
  // alltoallv's counts differ by rank and by peer: its call is compared by kind and type alone.
  std::string text = kind == OpKind::alltoallv ? fmt::format("blocks of any size, {}", name_of(type))
                                               : fmt::format("count {} {}", count, name_of(type));
  if (has_reduce_op(kind) && op >= 0) text += fmt::format(", op {}", name_of(static_cast<ReduceOp>(op)));
  if (has_root(kind)) text += fmt::format(", root {}", root);
  if ((kind == OpKind::send || kind == OpKind::recv || kind == OpKind::sendrecv) && root >= 0)
    text += fmt::format(", {} rank {}", kind == OpKind::send ? "to" : "from", root);
  return text;
}

std::string describe(const OpView& r) {
  auto kind = static_cast<OpKind>(r.kind);
  return fmt::format(
      "{} #{} on '{}' ({})", name_of(kind), r.seq, r.comm_name,
      arguments(kind, r.count, static_cast<DataType>(r.type), static_cast<int>(r.op), static_cast<int>(r.root)));
}

namespace {
// "0-2, 5" for 0, 1, 2, 5.
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return text;
}
}  // namespace

std::string ranks_phrase(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", rank_list(ranks));
}

namespace {
std::string short_call(const OpView& r) {  // "allreduce #3"
  return fmt::format("{} #{}", name_of(static_cast<OpKind>(r.kind)), r.seq);
}
}  // namespace

namespace {
std::vector<int> ranks_where(const std::vector<Awaited>& awaited, Whereabouts where) {
  std::vector<int> ranks;
  for (const Awaited& a : awaited)
    if (a.where == where) ranks.push_back(a.rank);
  return ranks;
}
}  // namespace

std::vector<int> missing_ranks(const std::vector<Awaited>& awaited) {
  std::vector<int> ranks;
  for (const Awaited& a : awaited)
    if (a.where != Whereabouts::arrived) ranks.push_back(a.rank);
  return ranks;
}

namespace {
// Ranks in a different collective, a group per call; this call's group holds the ranks that
// arrived (me included).
std::map<std::string, std::vector<int>> groups_by_call(const std::vector<Awaited>& awaited, int my_rank,
                                                       const std::string& my_call) {
  std::map<std::string, std::vector<int>> groups;
  std::vector<int> arrived = ranks_where(awaited, Whereabouts::arrived);
  arrived.push_back(my_rank);
  std::sort(arrived.begin(), arrived.end());
  for (const Awaited& a : awaited)
    if (a.where == Whereabouts::elsewhere) groups[a.other_call].push_back(a.rank);
  groups[my_call] = arrived;
  return groups;
}
}  // namespace

// The diagnosis of a collective: the ranks that diverged first, then where the others are.
// The largest group (on a tie, the one with the lowest rank) is taken as the program's
// intended path, so every rank would say the same.
std::string collective_diagnosis(const std::vector<Awaited>& awaited, int my_rank, const std::string& my_call) {
  const auto groups = groups_by_call(awaited, my_rank, my_call);
  auto majority = groups.begin();
  for (auto it = groups.begin(); it != groups.end(); ++it)
    if (it->second.size() > majority->second.size() ||
        (it->second.size() == majority->second.size() && it->second.front() < majority->second.front()))
      majority = it;
  std::vector<std::string> parts;
  auto add = [&](const std::string& phrase, const std::vector<int>& ranks) {
    if (!ranks.empty()) parts.push_back(fmt::format("{} {}", ranks_phrase(ranks), phrase));
  };
  auto are = [&](Whereabouts w, const char* one, const char* many, const std::string& rest) {
    const std::vector<int> ranks = ranks_where(awaited, w);
    add(fmt::format("{} {}", ranks.size() > 1 ? many : one, rest), ranks);
  };
  std::map<std::string, std::vector<int>> left_by_reason;
  for (const Awaited& a : awaited)
    if (a.where == Whereabouts::left) left_by_reason[a.other_call].push_back(a.rank);
  for (const auto& [reason, ranks] : left_by_reason) add(fmt::format("left the program ({})", reason), ranks);
  are(Whereabouts::dead, "is", "are", "dead");
  are(Whereabouts::stopped, "is", "are", "stopped (suspended)");
  add(fmt::format("finished without calling {}", my_call), ranks_where(awaited, Whereabouts::finished));
  are(Whereabouts::interrupted, "was", "were", "interrupted");
  add(fmt::format("never called {}: not in any collective", my_call), ranks_where(awaited, Whereabouts::outside));
  add(fmt::format("did not arrive in {} and their node gave no answer (state unknown)", my_call),
      ranks_where(awaited, Whereabouts::unknown));
  for (auto it = groups.begin(); it != groups.end(); ++it)
    if (it != majority) add("called " + it->first, it->second);
  // Never "every rank has arrived" beside a rank that has not.
  if (parts.empty()) add(fmt::format("did not arrive in {}", my_call), missing_ranks(awaited));
  if (parts.empty()) return "every rank has arrived (the wait is inside the transport)";
  return fmt::format("{} where {} called {}", fmt::join(parts, "; "), ranks_phrase(majority->second), majority->first);
}

// A send or receive waits for one peer: who waits for whom, and what the peer does.
std::string point_to_point_diagnosis(const std::vector<Awaited>& awaited, const OpCall& call,
                                     const std::string& my_call) {
  if (call.root < 0)  // a receive from any rank: each awaited rank has its line below
    return fmt::format("rank {} waits to receive from any rank ({}), and no rank sends to it", call.comm_rank,
                       my_call);
  const Awaited& peer = awaited.front();  // the only rank a send or receive waits for
  std::string doing = "is not in any collective or send/receive";
  switch (peer.where) {
    case Whereabouts::dead:
      doing = "is dead";
      break;
    case Whereabouts::left:
      doing = fmt::format("left the program ({})", peer.other_call);
      break;
    case Whereabouts::stopped:
      doing = "is stopped (suspended)";
      break;
    case Whereabouts::finished:
      doing = "has finished";
      break;
    case Whereabouts::unknown:
      doing = "runs on a node that gave no answer (state unknown)";
      break;
    case Whereabouts::elsewhere:
      if (peer.other_call == my_call) break;
      doing = fmt::format("is waiting in {} instead (a send that never came, or a cycle of waits)", peer.other_call);
      break;
    default:
      break;
  }
  return fmt::format("rank {} waits {} rank {} ({}), and rank {} {}", call.comm_rank,
                     call.kind == OpKind::send ? "to send to" : "to receive from", peer.rank, my_call, peer.rank,
                     doing);
}

Awaited where_is(int r, const std::string& rank, const RankView& v, const OpCall& call, double ask_budget_s) {
  const bool point_to_point = is_point_to_point(call.kind);
  using W = Whereabouts;
  if (v.pid == 0)  // no board that could be read says anything about it
    return {r, W::unknown,
            fmt::format("{}: no answer from its node within {:.1f} s (no rank there is waiting in a collective to "
                        "answer: all computing, stopped or dead, or the node is unreachable); its state is unknown",
                        rank, ask_budget_s)};
  std::string last = "it has made no collective call yet";
  if (v.last.kind != 0)
    last = v.last.returned_ago_ns >= 0
               ? fmt::format("its last call, {}, returned {} ago", describe(v.last), seconds(v.last.returned_ago_ns))
               : fmt::format("its last call is {}, entered {} ago", describe(v.last), seconds(v.last.started_ago_ns));
  if (v.state == RankState::interrupted)  // gone, or going, because of a Ctrl-C: no failure
    return {r, W::interrupted, fmt::format("{} was interrupted (Ctrl-C or SIGTERM) and is ending", rank)};
  // It said why it leaves (the PyTorch backend does, at the program's exit).
  const bool said_why = v.leaving[0] != '\0';
  if (said_why && v.process == ProcessState::gone)
    return {r, W::left, fmt::format("{} left the program ({}): process {} is gone; {}", rank, v.leaving, v.pid, last),
            v.leaving};
  if (v.process == ProcessState::gone)
    return {r, W::dead, fmt::format("{} is dead: process {} is gone (crashed or killed); {}", rank, v.pid, last)};
  if (v.process == ProcessState::stopped)
    return {
        r, W::stopped,
        fmt::format("{} is stopped: process {} is suspended (SIGSTOP, Ctrl-Z or a debugger); {}", rank, v.pid, last)};
  // It has arrived once it entered this collective (seq) on this communicator — and, when its
  // latest call is this very one, with the same arguments.
  const bool same_number = v.last.comm_id == call.comm_id && v.last.seq == call.seq;
  const bool same_call = v.last.kind == static_cast<std::int64_t>(call.kind) && v.last.count == call.count &&
                         v.last.type == static_cast<std::int64_t>(call.type) && v.last.op == call.op &&
                         v.last.root == call.root;
  if (!point_to_point && v.entered > call.seq && (!same_number || same_call)) return {r, W::arrived, ""};
  if (said_why) return {r, W::left, fmt::format("{} left the program ({}) and is ending; {}", rank, v.leaving, last), v.leaving};
  // (In the last meeting, or stopped there by another rank's report: it finished all the same.)
  if (v.state == RankState::finalizing ||
      ((v.state == RankState::in_collective || v.state == RankState::reported) &&
       v.current.kind == static_cast<std::int64_t>(OpKind::finalize)))
    return {r, W::finished,
            fmt::format("{} has finished its work and is shutting down (it skipped this collective)", rank)};
  // In this very call (the same number on the same communicator) with other arguments: the
  // most common collective bug (an uneven last batch, a rank-dependent shape) — named as such.
  const bool same_arguments =
      (v.current.count == call.count || call.kind == OpKind::alltoallv) &&  // (alltoallv's counts differ by rank)
      v.current.type == static_cast<std::int64_t>(call.type) && v.current.op == call.op && v.current.root == call.root;
  if (!point_to_point && (v.state == RankState::in_collective || v.state == RankState::reported) &&
      v.current.comm_id == call.comm_id && v.current.seq == call.seq &&
      v.current.kind == static_cast<std::int64_t>(call.kind) && !same_arguments) {
    const std::string theirs = arguments(call.kind, v.current.count, static_cast<DataType>(v.current.type),
                                         static_cast<int>(v.current.op), static_cast<int>(v.current.root));
    const std::string mine = arguments(call.kind, call.count, call.type, call.op, call.root);
    const char* what = v.current.count != call.count                          ? "the sizes disagree"
                       : v.current.type != static_cast<std::int64_t>(call.type) ? "the types disagree"
                                                                                : "the arguments disagree";
    return {r, W::elsewhere,
            fmt::format("{} is in the same call, {}, with other arguments: {} there against {} here — {}", rank,
                        describe(v.current), theirs, mine, what),
            fmt::format("{} with {} against {} here ({})", short_call(v.current), theirs, mine, what),
            v.state == RankState::reported};
  }
  if (v.state == RankState::in_collective || v.state == RankState::reported)
    return {r, W::elsewhere,
            fmt::format("{} is waiting in a different call, {}, for {}", rank, describe(v.current),
                        seconds(v.current.started_ago_ns)),
            short_call(v.current), v.state == RankState::reported};
  return {r, W::outside, fmt::format("{} is not in any collective (computing, or stuck outside comm); {}", rank, last)};
}

bool found_trouble(const std::vector<Awaited>& awaited, bool interrupted_elsewhere) {
  for (const Awaited& a : awaited)
    if (a.where == Whereabouts::dead || a.where == Whereabouts::left || a.where == Whereabouts::stopped ||
        a.reported || (a.where == Whereabouts::unknown && !interrupted_elsewhere))
      return true;
  return false;
}

}  // namespace comm
