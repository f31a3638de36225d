// The exceptions of the comm library: a message with its context already in it.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace comm {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A mistake in what the user asked for, the same on every rank: reported once, exit 2
// (comm::Runtime::run).
class UsageError : public Error {
 public:
  using Error::Error;
};

// A wait past its deadline, where the program asked to catch it instead of ending the job
// (--on-timeout raise, NANODIST_ON_TIMEOUT=raise): the watchdog's report is printed first. The
// job's communicators are not usable after it: save what can be saved and exit.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Throws comm::Error with a fmt-formatted message.
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Throws comm::Error naming the MPI call and MPI's own description of `code` when it is not MPI_SUCCESS.
void check_mpi(int code, const char* what);

}  // namespace comm
