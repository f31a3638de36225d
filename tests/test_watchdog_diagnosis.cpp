// The watchdog's diagnosis alone: pure functions of the ranks' board views
// (comm/watchdog/diagnosis.hpp), fed views made by hand — no MPI, no processes. The
// end-to-end cases (a rank that skips, dies, stops…) are tests/test_watchdog.cpp's.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "comm/watchdog/diagnosis.hpp"

namespace {

using comm::Awaited;
using comm::OpKind;
using comm::ProcessState;
using comm::RankState;
using comm::RankView;
using comm::Whereabouts;

const std::vector<int> kMembers = {0, 1, 2, 3};

// Rank 0's call: allreduce #3 of 4 floats (sum) on 'world'.
comm::OpCall allreduce_call() {
  comm::OpCall call;
  call.kind = OpKind::allreduce;
  call.comm_id = 7;
  call.comm_name = "world";
  call.members = &kMembers;
  call.comm_rank = 0;
  call.seq = 3;
  call.count = 4;
  call.type = comm::DataType::f32;
  call.op = 0;
  return call;
}

comm::OpView op(OpKind kind, std::int64_t seq, std::int64_t comm_id = 7) {
  comm::OpView v;
  v.kind = static_cast<std::int64_t>(kind);
  v.comm_id = comm_id;
  v.seq = seq;
  v.count = 4;
  v.op = kind == OpKind::allreduce ? 0 : -1;
  v.started_ago_ns = 2'000'000'000;
  std::strcpy(v.comm_name, "world");
  return v;
}

// A live rank's view: running, with `entered` collectives entered on the communicator.
RankView live(std::int64_t entered) {
  RankView v;
  v.world_rank = 1;
  v.pid = 4242;
  v.process = ProcessState::running;
  v.state = RankState::running;
  v.entered = entered;
  v.last = op(OpKind::allreduce, entered - 1);
  v.last.returned_ago_ns = 500'000'000;
  return v;
}

}  // namespace

TEST_CASE("where_is: each rank's whereabouts from its board view", "[watchdog][diagnosis]") {
  const comm::OpCall call = allreduce_call();
  SECTION("no board says anything: unknown, with how long its node was asked") {
    const Awaited a = comm::where_is(2, "rank 2", RankView{}, call, 1.0);
    CHECK(a.where == Whereabouts::unknown);
    CHECK_THAT(a.line, Catch::StartsWith("rank 2: no answer from its node within 1.0 s"));
  }
  SECTION("its process is gone: dead, with its last call") {
    RankView v = live(2);
    v.process = ProcessState::gone;
    const Awaited a = comm::where_is(2, "rank 2", v, call, 1.0);
    CHECK(a.where == Whereabouts::dead);
    CHECK_THAT(a.line, Catch::Contains("rank 2 is dead: process 4242 is gone") &&
                           Catch::Contains("its last call, allreduce #1 on 'world' (count 4 float, op sum), returned 0.5 s ago"));
  }
  SECTION("gone after saying why: left, with the reason") {
    RankView v = live(2);
    v.process = ProcessState::gone;
    std::strcpy(v.leaving, "exception: ValueError");
    const Awaited a = comm::where_is(1, "rank 1", v, call, 1.0);
    CHECK(a.where == Whereabouts::left);
    CHECK(a.other_call == "exception: ValueError");
  }
  SECTION("suspended: stopped") {
    RankView v = live(2);
    v.process = ProcessState::stopped;
    CHECK(comm::where_is(1, "rank 1", v, call, 1.0).where == Whereabouts::stopped);
  }
  SECTION("entered this collective with the same arguments: arrived; with others: not") {
    RankView v = live(4);
    v.last = op(OpKind::allreduce, 3);
    CHECK(comm::where_is(1, "rank 1", v, call, 1.0).where == Whereabouts::arrived);
    v.last.count = 5;  // the same number, another count: it made another call
    v.state = RankState::in_collective;
    v.current = v.last;
    const Awaited a = comm::where_is(1, "rank 1", v, call, 1.0);
    CHECK(a.where == Whereabouts::elsewhere);
    // … named as the same call with other arguments, both counts said, not "a different call"
    CHECK(a.line == "rank 1 is in the same call, allreduce #3 on 'world' (count 5 float, op sum), with other "
                    "arguments: count 5 float, op sum there against count 4 float, op sum here — the sizes disagree");
    CHECK(comm::collective_diagnosis({a}, 0, "allreduce #3") ==
          "rank 1 called allreduce #3 with count 5 float, op sum against count 4 float, op sum here (the sizes "
          "disagree) where rank 0 called allreduce #3");
    v.current.count = 4;
    v.current.type = static_cast<std::int64_t>(comm::DataType::f64);
    CHECK_THAT(comm::where_is(1, "rank 1", v, call, 1.0).line, Catch::EndsWith("the types disagree"));
  }
  SECTION("waiting in another call: elsewhere, named by that call") {
    RankView v = live(1);
    v.state = RankState::reported;
    v.current = op(OpKind::barrier, 1);
    const Awaited a = comm::where_is(2, "rank 2", v, call, 1.0);
    CHECK(a.where == Whereabouts::elsewhere);
    CHECK(a.other_call == "barrier #1");
    CHECK(a.reported);
    CHECK_THAT(a.line, Catch::StartsWith("rank 2 is waiting in a different call, barrier #1 on 'world'"));
  }
  SECTION("in the last meeting: finished; computing: outside") {
    RankView v = live(3);
    v.state = RankState::finalizing;
    CHECK(comm::where_is(3, "rank 3", v, call, 1.0).where == Whereabouts::finished);
    v.state = RankState::running;
    CHECK(comm::where_is(3, "rank 3", v, call, 1.0).where == Whereabouts::outside);
  }
}

TEST_CASE("collective_diagnosis names the ranks that diverged from the largest group", "[watchdog][diagnosis]") {
  std::vector<Awaited> awaited = {{1, Whereabouts::arrived, "", "", false},
                                  {2, Whereabouts::elsewhere, "rank 2 …", "barrier #1", false},
                                  {3, Whereabouts::dead, "rank 3 …", "", false}};
  CHECK(comm::collective_diagnosis(awaited, 0, "allreduce #3") ==
        "rank 3 is dead; rank 2 called barrier #1 where ranks 0-1 called allreduce #3");
  CHECK(comm::missing_ranks(awaited) == std::vector<int>{2, 3});

  // A tie between two groups: the one with the lowest rank is the program's path, so every
  // rank would print the same line.
  awaited = {{1, Whereabouts::elsewhere, "…", "barrier #1", false}};
  CHECK(comm::collective_diagnosis(awaited, 0, "allreduce #3") ==
        "rank 1 called barrier #1 where rank 0 called allreduce #3");
  CHECK(comm::collective_diagnosis(awaited, 2, "allreduce #3") ==
        "rank 2 called allreduce #3 where rank 1 called barrier #1");

  // Everyone arrived: the wait is inside the transport, never "every rank has arrived" beside a
  // rank that has not.
  awaited = {{1, Whereabouts::arrived, "", "", false}};
  CHECK(comm::collective_diagnosis(awaited, 0, "allreduce #3") ==
        "every rank has arrived (the wait is inside the transport)");
  CHECK(comm::ranks_phrase({0, 1, 2, 5}) == "ranks 0-2, 5");
}

TEST_CASE("point_to_point_diagnosis: who waits for whom, and what the peer does", "[watchdog][diagnosis]") {
  comm::OpCall call = allreduce_call();
  call.kind = OpKind::recv;
  call.seq = 35;
  call.root = 2;
  std::vector<Awaited> peer = {{2, Whereabouts::elsewhere, "…", "recv #18", false}};
  CHECK(comm::point_to_point_diagnosis(peer, call, "recv #35") ==
        "rank 0 waits to receive from rank 2 (recv #35), and rank 2 is waiting in recv #18 instead (a send that "
        "never came, or a cycle of waits)");
  peer[0].where = Whereabouts::dead;
  CHECK_THAT(comm::point_to_point_diagnosis(peer, call, "recv #35"), Catch::EndsWith("and rank 2 is dead"));
  call.root = -1;  // from any rank
  CHECK(comm::point_to_point_diagnosis(peer, call, "recv #4") ==
        "rank 0 waits to receive from any rank (recv #4), and no rank sends to it");
}

TEST_CASE("found_trouble: a dead, stopped or reporting rank is trouble; a silent node after a Ctrl-C is not",
          "[watchdog][diagnosis]") {
  std::vector<Awaited> awaited = {{1, Whereabouts::unknown, "…", "", false}};
  CHECK(comm::found_trouble(awaited, /*interrupted_elsewhere=*/false));
  CHECK_FALSE(comm::found_trouble(awaited, /*interrupted_elsewhere=*/true));
  awaited = {{1, Whereabouts::outside, "…", "", false}, {2, Whereabouts::interrupted, "…", "", false}};
  CHECK_FALSE(comm::found_trouble(awaited, false));
  awaited.push_back({3, Whereabouts::stopped, "…", "", false});
  CHECK(comm::found_trouble(awaited, false));
  CHECK(comm::found_trouble({{1, Whereabouts::elsewhere, "…", "barrier #1", true}}, false));
}
