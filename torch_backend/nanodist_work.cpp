// NanodistWork and the futures a group gives out (nanodist_work.hpp).
#include "torch_backend/nanodist_work.hpp"

#include <algorithm>

#include "comm/progress_thread.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace nanodist_torch {
namespace {

using comm::ProgressThread;
using c10d::OpType;

// How long a Work::wait() waits past the watchdog's deadline before it gives up: the thread's
// own collective reports at the deadline and ends the job; a wait still going past it means
// the thread is held by something no deadline watches (a future's callback).
constexpr double kWaitMarginSeconds = 10.0;
// The longest wait a std::chrono::milliseconds holds without overflow worries (a year).
constexpr double kLongestWaitSeconds = 365.0 * 24 * 3600;

}  // namespace

NanodistWork::NanodistWork(OpType type, std::vector<at::Tensor> outputs, std::string what, std::int64_t index,
                           std::shared_ptr<GroupCalls> group)
    : c10d::Work(-1, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      what_(std::move(what)),
      index_(index),
      group_(std::move(group)) {}

void NanodistWork::complete() {
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

void NanodistWork::fail(std::exception_ptr error) {
  future_->setErrorIfNeeded(error);  // (a callback of a completed future may be what threw)
  finish(error);
}

bool NanodistWork::wait(std::chrono::milliseconds timeout) {
  if (!isCompleted() && ProgressThread::is_current())
    TORCH_CHECK(false, "nanodist: ", what_, " is waited for on the communication thread (in a future's callback), "
                "but it runs on that thread after the callback returns: it would wait forever. Wait for it outside "
                "the callback, or chain another callback with then()");
  std::int64_t never = 0;
  first_waited_ns_.compare_exchange_strong(never, comm::now_ns());
  // Waits in rounds of the deadline: a round that ends with the thread still in the task it was
  // in when the round began (a callback that does not return) ends the wait; one that ends with
  // the thread moving on (calls queued before this one, each under its own deadline) goes on.
  const double round_s =
      std::min(kLongestWaitSeconds,
               (comm::has_watchdog() ? comm::watchdog().timeout_s() : kLongestWaitSeconds) + kWaitMarginSeconds);
  const auto round = std::chrono::milliseconds(static_cast<std::int64_t>(round_s * 1000));
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    const auto limit = timeout == kNoTimeout ? round : std::max(std::chrono::milliseconds(1), std::min(timeout - waited, round));
    const std::int64_t task_before = ProgressThread::get().task_started_ns();
    try {
      return c10d::Work::wait(limit);
    } catch (const c10::Error&) {
      if (isCompleted()) return c10d::Work::wait(kNoTimeout);  // done meanwhile, or its own error: as it is
      const std::int64_t task_now = ProgressThread::get().task_started_ns();
      const bool stuck = task_now != 0 && task_now == task_before;
      const bool out_of_time = timeout != kNoTimeout && std::chrono::steady_clock::now() - start >= timeout;
      if (out_of_time || stuck)
        TORCH_CHECK(false, "nanodist: ", what_, " is not done after ",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s",
                    stuck ? ": the communication thread has been held all that time by one task no deadline watches "
                            "(a future's callback that waits)"
                          : "");
    }
  }
}

c10::intrusive_ptr<c10::ivalue::Future> NanodistWork::getFuture() {
  const std::int64_t issued = group_->issued.load();
  if (issued > index_ + 1 && !isCompleted() && !ProgressThread::is_current())
    return group_->complete_after(future_, issued);
  return future_;
}

void GroupCalls::ran_one() {
  {
    std::lock_guard lock(mutex_);
    ++ran_;
  }
  release_ready();
}

c10::intrusive_ptr<c10::ivalue::Future> GroupCalls::complete_after(const c10::intrusive_ptr<c10::ivalue::Future>& call,
                                                                   std::int64_t after) {
  auto given = c10::make_intrusive<c10::ivalue::Future>(call->elementType());
  {
    std::lock_guard lock(mutex_);
    late_.push_back({after, call, given});
  }
  // (runs at once if the call is done already; else on the communication thread when it is)
  call->addCallback([self = shared_from_this()](c10::ivalue::Future&) { self->release_ready(); });
  return given;
}

void GroupCalls::release_ready() {
  std::vector<Late> ready;
  {
    std::lock_guard lock(mutex_);
    for (auto it = late_.begin(); it != late_.end();) {
      if (it->after <= ran_ && it->call->completed()) {
        ready.push_back(std::move(*it));
        it = late_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Late& late : ready) {  // (outside the lock: completing runs the future's callbacks)
    if (late.call->hasError())
      late.given->setError(late.call->exception_ptr());
    else
      late.given->markCompleted(late.call->value());
  }
}

}  // namespace nanodist_torch
