// comm::Work, the handle of an asynchronous call: test, wait (under the watchdog, its deadline
// counted from the start), cancel a receive nobody will match.
#include "comm/communicator.hpp"

namespace comm {

Work::~Work() {
  if (done()) return;
  try {
    wait();
  } catch (const TimeoutError&) {
    // --on-timeout raise: the job's calls are abandoned, this one with them. A receive is
    // withdrawn; any other operation is left as it is (its MPI requests may still be in use,
    // so they are neither waited for nor freed) until the program's end.
    if (op_ && !queued_) op_->cancel();
    static_cast<void>(op_.release());  // deliberately not destroyed
    queued_.reset();
    static_cast<void>(staged_.release());  // its pinned copies may still be written
  } catch (const std::exception& e) {
    // A destructor cannot throw: say it and end the job, as Runtime::run does with an error.
    fmt::print(stderr, "error: {}\n", e.what());
    MPI_Abort(job_world(), 1);
  }
}

Work& Work::operator=(Work&& other) {
  if (this != &other) {
    if (!done()) wait();
    op_ = std::move(other.op_);
    queued_ = std::move(other.queued_);
    staged_ = std::move(other.staged_);
    call_ = other.call_;
    start_ns_ = other.start_ns_;
    ran_ns_ = other.ran_ns_;
    source_ = other.source_;
  }
  return *this;
}

bool Work::test() {
  if (queued_ ? queued_->finished() : op_ && op_->test()) finish();
  return done();
}

void Work::wait() {
  if (op_ && !queued_) {
    OpScope scope(call_, start_ns_);
    op_->wait();
  }
  // A queued one: the communication thread runs it under the watchdog (its deadline, its
  // report); finish() waits for the thread to be done with it.
  if (!done()) finish();
}

bool Work::cancel() {
  if (!op_ || queued_ || !op_->cancel()) return done();
  op_.reset();
  return true;
}

void Work::finish() {
  const std::shared_ptr<Completion> queued = std::move(queued_);
  const std::exception_ptr error = queued ? queued->wait() : nullptr;
  ran_ns_ = queued ? queued->ran_ns() : std::pair{start_ns_, now_ns()};
  if (op_) source_ = op_->source();
  op_.reset();
  if (staged_) staged_->finish();  // device buffers: the results back from their host copies
  staged_.reset();
  if (error) std::rethrow_exception(error);
}

}  // namespace comm
