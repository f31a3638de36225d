#include "comm/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "comm/error.hpp"
#include "comm/watchdog/abort_hooks.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace comm::shm {
namespace {

// The names this process has been told and not yet unlinked (at most a few at a time: one per
// communicator being made). Fixed-size, so the exit paths can read it without allocating.
constexpr std::size_t kNameBytes = 64;
std::array<std::array<char, kNameBytes>, 16> in_making{};
std::atomic<int> in_making_count{0};

void remember(const std::string& name) {
  add_abort_hook(unlink_segments_in_making);  // every way out of the job unlinks them (comm/watchdog/abort_hooks.hpp)
  for (auto& slot : in_making)
    if (slot[0] == 0) {
      std::strncpy(slot.data(), name.c_str(), kNameBytes - 1);
      in_making_count.fetch_add(1);
      return;
    }
  fail("internal error: more than {} shm segments in the making at once", in_making.size());
}

void forget(const std::string& name) {
  for (auto& slot : in_making)
    if (name == slot.data()) {
      slot[0] = 0;
      in_making_count.fetch_sub(1);
    }
}

// Waits for every rank of `node` (watched: a rank that died is named, nobody hangs).
void watched_barrier(const Transport& node) {
  MPI_Request arrived;
  check_mpi(MPI_Ibarrier(node.mpi_comm(), &arrived), "MPI_Ibarrier");
  watchdog().wait_all(1, &arrived);
}

}  // namespace

void unlink_segments_in_making() {
  if (in_making_count.load() == 0) return;
  for (auto& slot : in_making)
    if (slot[0] != 0) shm_unlink(slot.data());
}

Segment::Segment(const Transport& node, std::size_t bytes) : bytes_(bytes) {
  // 1. Rank 0 picks a name no other job uses (its pid, a counter, a random number: pids repeat
  //    in containers that share /dev/shm) and tells the others, so that any of them can unlink
  //    it if the job ends before step 3.
  static int made = 0;
  std::array<char, kNameBytes> name{};
  if (node.rank() == 0)
    std::snprintf(name.data(), name.size(), "/nanodist-%d-%d-%08x", static_cast<int>(getpid()), made,
                  std::random_device{}());
  ++made;
  MPI_Request told;
  check_mpi(MPI_Ibcast(name.data(), kNameBytes, MPI_CHAR, 0, node.mpi_comm(), &told), "MPI_Ibcast");
  watchdog().wait_all(1, &told);
  name_ = name.data();
  remember(name_);
  // A failure below (it throws) must not leave the name behind.
  struct Unlinker {
    const std::string& name;
    bool armed = true;
    ~Unlinker() {
      if (!armed) return;
      shm_unlink(name.c_str());
      forget(name);
    }
  } unlinker{name_};

  // 2. Rank 0 creates it and reserves its memory (tmpfs gives none with ftruncate alone: a full
  //    /dev/shm would be found by a SIGBUS mid-collective); then everyone opens and maps it.
  int fd = -1;
  if (node.rank() == 0) {
    fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) fail("shm: cannot create {} in /dev/shm: {}", name_, std::strerror(errno));
    if (const int why = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); why != 0) {
      close(fd);
      fail(
          "shm: /dev/shm cannot hold a segment of {:.1f} MiB ({}): make it larger (docker: --shm-size) or use "
          "another backend",
          static_cast<double>(bytes) / (1 << 20), std::strerror(why));
    }
  }
  watched_barrier(node);
  if (node.rank() != 0) {
    fd = shm_open(name_.c_str(), O_RDWR, 0600);
    if (fd < 0) fail("shm: cannot open {} (made by local rank 0): {}", name_, std::strerror(errno));
  }
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_error = errno;
  close(fd);
  if (mapped == MAP_FAILED) fail("shm: cannot map {} ({} bytes): {}", name_, bytes, std::strerror(map_error));
  data_ = static_cast<char*>(mapped);

  // 3. Everyone has it mapped: the name can go (ENOENT for all but the first is expected).
  watched_barrier(node);
  unlinker.armed = false;
  shm_unlink(name_.c_str());
  forget(name_);
}

Segment::~Segment() {
  if (data_) munmap(data_, bytes_);
}

}  // namespace comm::shm
