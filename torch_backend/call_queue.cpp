// ProcessGroupNanodist's queue: every call becomes a task on the communication thread, run
// there one at a time in the order issued (a collective runs to its end; a send or receive is
// posted, then polled between later tasks until done), so a group's calls keep their order on
// every rank and a receive never holds up what is queued behind it (docs/pytorch.md, "Order").
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "comm/progress_thread.hpp"
#include "torch_backend/process_group.hpp"

namespace nanodist_torch {
namespace {

using comm::ProgressThread;
using c10d::OpType;

}  // namespace

c10::intrusive_ptr<NanodistWork> ProcessGroupNanodist::make_work(OpType type, const char* name,
                                                               std::vector<at::Tensor> outputs) {
  const std::int64_t index = calls_->issued.fetch_add(1);
  return c10::make_intrusive<NanodistWork>(type, std::move(outputs),
                                           fmt::format("{} (call {} on '{}')", name, index, name_), index, calls_);
}

// The end of every call: its task queued on the communication thread — or, issued there (by a
// future's callback, which runs right after its call: PyTorch's PowerSGD hook does this), run
// at once, right after that call on every rank (docs/pytorch.md, "Order").
namespace {
c10::intrusive_ptr<c10d::Work> run_or_queue(const c10::intrusive_ptr<NanodistWork>& work, std::function<void()> task,
                                            bool overlap) {
  if (ProgressThread::get().on_thread()) {
    task();
    return work;
  }
  TORCH_CHECK(ProgressThread::get().post(std::move(task)),
              "nanodist: the communication thread has ended (the program is exiting)");
  if (!overlap) work->wait(kNoTimeout);  // NANODIST_TORCH_OVERLAP=0: each call returns when it is done
  return work;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::enqueue(OpType type, const char* name,
                                                             std::vector<at::Tensor> outputs,
                                                             std::function<void(comm::Communicator&)> body) {
  auto work = make_work(type, name, std::move(outputs));
  std::shared_ptr<comm::Communicator> communicator = communicator_;
  auto task = [work, communicator, calls = calls_, body = std::move(body)] {
    // The results are written in place, as torch.distributed's own backends write them: no
    // autograd recording (a parameter that requires grad can be broadcast into).
    at::NoGradGuard no_grad;
    try {
      body(*communicator);
      work->complete();
    } catch (...) {
      work->fail(std::current_exception());
    }
    calls->ran_one();
  };
  return run_or_queue(work, std::move(task), overlap_);
}

namespace {

// A send or receive posted on the communication thread: its Work, and when to stop waiting.
struct MessageInFlight {
  comm::Work posted;
  std::int64_t deadline_ns = std::numeric_limits<std::int64_t>::max();  // none until someone waits
  comm::LeftRankWatch peer{comm::now_ns()};  // its peer gone a second: the watchdog's own wait takes over
};

// One look at a message in flight: true once it is done, or has failed. Past its deadline,
// or once its peer has left the program, the watchdog's own wait takes over (its report).
std::atomic<bool> g_withdraw_receives{false};

bool advance(MessageInFlight& m, const NanodistWork& work) {
  if (m.posted.test()) return true;
  if (g_withdraw_receives.load() && m.posted.cancel())  // the program's end: a receive nobody took
    throw comm::Error("nanodist: a receive withdrawn at the program's end (no message came for it)");
  const std::int64_t now = comm::now_ns();
  // The deadline counts from the first wait(): a receive posted early and only looked at with
  // is_completed() (a stop signal, say) may stay open as long as the program likes.
  const std::int64_t waited = work.first_waited_ns();
  if (waited != 0 && m.deadline_ns == std::numeric_limits<std::int64_t>::max())
    m.deadline_ns = waited + static_cast<std::int64_t>(std::min(comm::watchdog().timeout_s() * 1e9, 1e18));
  const bool peer_gone = m.peer.gone_long_enough(comm::watchdog(), m.posted.call(), now);
  if (now < m.deadline_ns && !peer_gone) return false;
  m.posted.wait();  // the report, and the end of the job (or it completes meanwhile)
  return true;
}

}  // namespace

void withdraw_pending_receives() { g_withdraw_receives = true; }

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::enqueue_message(OpType type, const char* name,
                                                                     std::vector<at::Tensor> outputs, Post post,
                                                                     Finish finish) {
  auto work = make_work(type, name, std::move(outputs));
  std::shared_ptr<comm::Communicator> communicator = communicator_;
  auto task = [work, communicator, calls = calls_, post = std::move(post), finish = std::move(finish)] {
    auto message = std::make_shared<MessageInFlight>();
    auto done = [work, message, finish] {
      at::NoGradGuard no_grad;
      finish(*work, message->posted);
      work->complete();
    };
    bool finished = true;
    try {
      message->posted = post(*communicator);
      if (message->posted.test())
        done();
      else
        finished = false;
    } catch (...) {
      work->fail(std::current_exception());
    }
    calls->ran_one();
    if (finished) return;
    // Not done yet: the thread goes on to the next call, and looks again between calls. (The
    // communicator is kept: the Work's call names it, and the group may be destroyed meanwhile.)
    ProgressThread::get().keep_polling([work, message, done, communicator] {
      try {
        if (!advance(*message, *work)) return false;
        done();
      } catch (...) {
        work->fail(std::current_exception());
      }
      return true;
    });
  };
  return run_or_queue(work, std::move(task), overlap_);
}

}  // namespace nanodist_torch
