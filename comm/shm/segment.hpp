// A POSIX shared-memory segment that the ranks of one node map together.
//
// Local rank 0 names it, creates it and sizes it; the others open it; once every rank has it
// mapped, every rank unlinks the name, so nothing is left in /dev/shm however the job ends
// afterwards (the memory goes when the last process unmaps it or dies). Until then the name
// is listed here, and the watchdog and Ctrl-C unlink what is listed before they end the process.
#pragma once

#include <cstddef>
#include <string>

#include "comm/transport.hpp"

namespace comm::shm {

class Segment {
 public:
  // Collective over `node` (ranks of one node), inside the watchdog's scope. `bytes` is the
  // same on every rank. The memory starts zeroed.
  Segment(const Transport& node, std::size_t bytes);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  char* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  char* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::string name_;
};

// Unlinks the segments this process is still making (async-signal-safe enough for _exit paths:
// shm_unlink of fixed names, no allocation).
void unlink_segments_in_making();

}  // namespace comm::shm
