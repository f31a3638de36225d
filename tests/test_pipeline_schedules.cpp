// Each pipeline schedule's order, without processes or a model: the schedules drive a
// recording stage (parallel::StageSteps) on one thread per stage, messages pass through
// queues, each forward or backward takes one time slot, and a receive blocks its stage until
// the message is there (as MPI's does). The slots must be exactly the pictures docs/pipeline_parallel.md
// draws (GPipe and 1F1B for p = 4, M = 4; interleaved for p = 2, v = 2, M = 4), read from the
// page itself; every message must be received where it was sent, in the order sent; and the
// sequence of forwards, backwards, sends and receives of a small case is checked call by call.
// A send here never waits for its receive, so what this cannot see is two neighbours that
// both wait to send to each other (pp/stage.hpp's deadlock rule): the trainers' runs under
// mpiexec, with messages past the eager size, are what check that.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "parallel/pp/schedule.hpp"

namespace {

using parallel::Slot;

// A message between neighbours: the slot it is the input (or gradient) of on the receiving
// stage, and the time slot from which it can be used.
struct Message {
  Slot slot;
  int ready = 0;
};

// One direction between two stages: FIFO, like MPI between a pair of ranks on one tag.
class Channel {
 public:
  void push(Message m) {
    std::lock_guard lock(mutex_);
    queue_.push_back(m);
    arrived_.notify_all();
  }
  // The next message, which must be `expected`'s; fails the test (no hang) after 5 s.
  int pop(Slot expected, const std::string& where) {
    std::unique_lock lock(mutex_);
    if (!arrived_.wait_for(lock, std::chrono::seconds(5), [&] { return !queue_.empty(); }))
      throw std::runtime_error(fmt::format("{}: waits forever for micro-batch {} chunk {}", where, expected.micro,
                                           expected.chunk));
    const Message m = queue_.front();
    queue_.pop_front();
    if (m.slot.micro != expected.micro || m.slot.chunk != expected.chunk)
      throw std::runtime_error(fmt::format("{}: expected micro-batch {} chunk {}, the next message is {} chunk {}",
                                           where, expected.micro, expected.chunk, m.slot.micro, m.slot.chunk));
    return m.ready;
  }
  bool empty() {
    std::lock_guard lock(mutex_);
    return queue_.empty();
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<Message> queue_;
};

struct Pipeline {
  int P, M, V;
  std::vector<Channel> forward, backward;  // forward[r]: r → r + 1 (P − 1 → 0); backward[r]: r → r − 1 (0 → P − 1)
  Pipeline(int p, int m, int v) : P(p), M(m), V(v), forward(static_cast<std::size_t>(p)), backward(static_cast<std::size_t>(p)) {}
};

// One stage that records what the schedule makes it do, and when.
class RecordingStage final : public parallel::StageSteps {
 public:
  RecordingStage(Pipeline& pipe, int r) : pipe_(pipe), r_(r) {}
  int micro_batches() const override { return pipe_.M; }
  int chunks() const override { return pipe_.V; }
  int stage() const override { return r_; }
  int stages() const override { return pipe_.P; }

  void forward(int m, int v) override {
    const int start = std::max(clock_, first_chunk(v) ? 0 : ready(inputs_, {v, m}, "forward"));
    run(start, fmt::format("F{}{}", m, chunk_letter(v)));
    outputs_[key({v, m})] = clock_;
  }
  void backward(int m, int v) override {
    // The last chunk starts from its own loss; the others from the gradient received.
    const int start = std::max(clock_, last_chunk(v) ? outputs_.at(key({v, m})) : ready(gradients_, {v, m}, "backward"));
    run(start, fmt::format("B{}{}", m, chunk_letter(v)));
    input_gradients_[key({v, m})] = clock_;
  }
  void recv_forward(int m) override { receive_input({0, m}); }
  void send_forward(int m) override { send_output({0, m}); }
  void recv_backward(int m) override { receive_gradient({0, m}); }
  void send_backward(int m) override { send_input_gradient({0, m}); }
  void send_forward_recv_backward(int send_m, int recv_m) override {
    send_output({0, send_m});
    receive_gradient({0, recv_m});
  }
  void send_backward_recv_forward(int send_m, int recv_m) override {
    send_input_gradient({0, send_m});
    receive_input({0, recv_m});
  }
  void exchange_forward(std::optional<Slot> send, std::optional<Slot> recv) override {
    if (send) send_output(*send);
    if (recv) receive_input(*recv);
  }
  void exchange_backward(std::optional<Slot> send, std::optional<Slot> recv) override {
    if (send) send_input_gradient(*send);
    if (recv) receive_gradient(*recv);
  }

  std::vector<std::string> slots;   // time slot t: "F0", "B2b" or "."
  std::vector<std::string> events;  // every call that did something, in order
 private:
  static int key(Slot s) { return s.chunk * 1000 + s.micro; }
  std::string chunk_letter(int v) const { return pipe_.V > 1 ? std::string(1, static_cast<char>('a' + v)) : ""; }
  std::string name(char kind, Slot s) const { return fmt::format("{}{}{}", kind, s.micro, chunk_letter(s.chunk)); }
  int ready(const std::map<int, int>& got, Slot s, const char* what) const {
    auto it = got.find(key(s));
    if (it == got.end())
      throw std::runtime_error(fmt::format("stage {}: {} of micro-batch {} chunk {} before its input was received", r_,
                                           what, s.micro, s.chunk));
    return it->second;
  }
  void run(int start, const std::string& label) {
    slots.resize(static_cast<std::size_t>(start), ".");
    slots.push_back(label);
    clock_ = start + 1;
    events.push_back(label);
  }
  // The activation of `s` on to the next stage (stage P − 1's goes to stage 0's next chunk).
  void send_output(Slot s) {
    if (last_chunk(s.chunk)) return;
    const Slot there{r_ == pipe_.P - 1 ? s.chunk + 1 : s.chunk, s.micro};
    pipe_.forward[static_cast<std::size_t>(r_)].push({there, outputs_.at(key(s))});
    events.push_back(fmt::format("send {} →{}", name('F', s), (r_ + 1) % pipe_.P));
  }
  void receive_input(Slot s) {
    if (first_chunk(s.chunk)) return;
    const int from = (r_ + pipe_.P - 1) % pipe_.P;
    inputs_[key(s)] = pipe_.forward[static_cast<std::size_t>(from)].pop(s, fmt::format("stage {} recv_forward", r_));
    clock_ = std::max(clock_, inputs_[key(s)]);  // a receive blocks: the stage idles until it arrives
    events.push_back(fmt::format("recv {} ←{}", name('F', s), from));
  }
  // The gradient of `s`'s input back to the previous stage (stage 0's to stage P − 1's previous chunk).
  void send_input_gradient(Slot s) {
    if (first_chunk(s.chunk)) return;
    const Slot there{r_ == 0 ? s.chunk - 1 : s.chunk, s.micro};
    pipe_.backward[static_cast<std::size_t>(r_)].push({there, input_gradients_.at(key(s))});
    events.push_back(fmt::format("send {} →{}", name('B', s), (r_ + pipe_.P - 1) % pipe_.P));
  }
  void receive_gradient(Slot s) {
    if (last_chunk(s.chunk)) return;
    const int from = (r_ + 1) % pipe_.P;
    gradients_[key(s)] = pipe_.backward[static_cast<std::size_t>(from)].pop(s, fmt::format("stage {} recv_backward", r_));
    clock_ = std::max(clock_, gradients_[key(s)]);
    events.push_back(fmt::format("recv {} ←{}", name('B', s), from));
  }

  Pipeline& pipe_;
  int r_;
  int clock_ = 0;
  std::map<int, int> inputs_, gradients_, outputs_, input_gradients_;  // slot → time it is there
};

// Runs `schedule` on p stages, one thread each; returns the stages (their slots and events).
std::vector<std::unique_ptr<RecordingStage>> simulate(int p, int M, int V, parallel::Schedule schedule) {
  Pipeline pipe(p, M, V);
  std::vector<std::unique_ptr<RecordingStage>> stages;
  for (int r = 0; r < p; ++r) stages.push_back(std::make_unique<RecordingStage>(pipe, r));
  std::vector<std::string> errors(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      try {
        parallel::run_schedule(schedule, *stages[static_cast<std::size_t>(r)]);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) REQUIRE(e.empty());
  for (int r = 0; r < p; ++r) {  // every message sent was received
    CHECK(pipe.forward[static_cast<std::size_t>(r)].empty());
    CHECK(pipe.backward[static_cast<std::size_t>(r)].empty());
  }
  std::size_t width = 0;
  for (const auto& s : stages) width = std::max(width, s->slots.size());
  for (auto& s : stages) s->slots.resize(width, ".");
  return stages;
}

// The pictures of docs/pipeline_parallel.md: each block of "stage r  F0  F1 …" lines, in page order.
std::vector<std::vector<std::vector<std::string>>> pictures_in_docs() {
  std::ifstream page(NANODIST_DOCS_DIR "/pipeline_parallel.md");
  REQUIRE(page.good());
  std::vector<std::vector<std::vector<std::string>>> pictures;
  bool in_picture = false;
  for (std::string line; std::getline(page, line);) {
    std::istringstream words(line);
    std::string first, number;
    words >> first >> number;
    const bool row = first == "stage" && !number.empty() && std::isdigit(static_cast<unsigned char>(number[0])) &&
                     line.find(" F0") != std::string::npos;
    if (!row) {
      in_picture = false;
      continue;
    }
    if (!in_picture) pictures.emplace_back();
    in_picture = true;
    std::vector<std::string> slots;
    for (std::string w; words >> w;) slots.push_back(w);
    pictures.back().push_back(slots);
  }
  return pictures;
}

void check_against(const std::vector<std::unique_ptr<RecordingStage>>& stages,
                   const std::vector<std::vector<std::string>>& picture) {
  REQUIRE(picture.size() == stages.size());
  for (std::size_t r = 0; r < stages.size(); ++r) {
    INFO("stage " << r << ": ran " << fmt::format("{}", fmt::join(stages[r]->slots, " ")));
    CHECK(stages[r]->slots == picture[r]);
  }
}

}  // namespace

TEST_CASE("GPipe, 1F1B and interleaved 1F1B run the slots docs/pipeline_parallel.md draws", "[pipeline][schedule]") {
  const auto pictures = pictures_in_docs();
  REQUIRE(pictures.size() == 3);  // GPipe, 1F1B (p = 4, M = 4), interleaved (p = 2, v = 2, M = 4)
  SECTION("GPipe") { check_against(simulate(4, 4, 1, parallel::Schedule::gpipe), pictures[0]); }
  SECTION("1F1B") { check_against(simulate(4, 4, 1, parallel::Schedule::one_f_one_b), pictures[1]); }
  SECTION("interleaved 1F1B") { check_against(simulate(2, 4, 2, parallel::Schedule::one_f_one_b), pictures[2]); }
}

TEST_CASE("1F1B on 2 stages, 3 micro-batches: every forward, backward, send and receive in order",
          "[pipeline][schedule]") {
  const auto stages = simulate(2, 3, 1, parallel::Schedule::one_f_one_b);
  // Stage 0: one warm-up forward, then forward, paired send/receive, backward, paired
  // send/receive; stage 1 (no warm-up) mirrors it. The paired calls keep both directions of
  // one neighbour in one call (pp/stage.hpp's deadlock rule).
  CHECK(stages[0]->events == std::vector<std::string>{"F0", "send F0 →1", "F1", "send F1 →1", "recv B0 ←1", "B0",
                                                       "F2", "send F2 →1", "recv B1 ←1", "B1", "recv B2 ←1", "B2"});
  CHECK(stages[1]->events == std::vector<std::string>{"recv F0 ←0", "F0", "B0", "send B0 →0", "recv F1 ←0", "F1",
                                                       "B1", "send B1 →0", "recv F2 ←0", "F2", "B2", "send B2 →0"});
}

TEST_CASE("every schedule delivers each message where it was sent, in order, on 2-4 stages", "[pipeline][schedule]") {
  for (int p : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int M : {p, 2 * p})
        for (parallel::Schedule s : {parallel::Schedule::gpipe, parallel::Schedule::one_f_one_b}) {
          INFO("p " << p << ", v " << v << ", M " << M << ", " << parallel::name_of(s));
          const auto stages = simulate(p, M, v, s);
          // Every stage ran every forward and backward of every chunk once.
          for (const auto& stage : stages) {
            int forwards = 0, backwards = 0;
            for (const std::string& slot : stage->slots) {
              forwards += slot[0] == 'F';
              backwards += slot[0] == 'B';
            }
            CHECK(forwards == v * M);
            CHECK(backwards == v * M);
          }
        }
}
