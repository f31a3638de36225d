#include "comm/watchdog/status_board.hpp"
#include "comm/host_split.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <random>

#include "comm/error.hpp"

namespace comm {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void pack_text(PackedText& into, std::string_view text) {
  char packed[sizeof(std::uint64_t) * 6] = {};
  std::memcpy(packed, text.data(), std::min(text.size(), sizeof(packed) - 1));
  for (std::size_t i = 0; i < into.size(); ++i) {
    std::uint64_t word;
    std::memcpy(&word, packed + 8 * i, 8);
    into[i].store(word, std::memory_order_relaxed);
  }
}

std::string unpack_text(const PackedText& from) {
  char packed[sizeof(std::uint64_t) * 6 + 1] = {};
  for (std::size_t i = 0; i < from.size(); ++i) {
    std::uint64_t word = from[i].load(std::memory_order_relaxed);
    std::memcpy(packed + 8 * i, &word, 8);
  }
  return std::string(packed);
}

void OpRecord::set_name(std::string_view name) { pack_text(comm_name, name); }

std::string OpRecord::name() const { return unpack_text(comm_name); }

OpView OpRecord::view(std::int64_t now) const {
  OpView v;
  v.kind = kind;
  v.comm_id = comm_id;
  v.seq = seq;
  v.count = count;
  v.type = type;
  v.op = op;
  v.root = root;
  v.started_ago_ns = now - start_ns;
  const std::int64_t end = end_ns;
  v.returned_ago_ns = end ? now - end : -1;
  const std::string text = name();
  std::memcpy(v.comm_name, text.data(), std::min(text.size(), sizeof(v.comm_name) - 1));
  return v;
}

StatusBoard::StatusBoard(MPI_Comm world) {
  check_mpi(MPI_Comm_rank(world, &world_rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(world, &world_size_), "MPI_Comm_size");
  MPI_Comm node;
  node = split_by_host(world, world_rank_);
  int node_rank = 0;
  MPI_Comm_rank(node, &node_rank);

  // The node's first rank names and creates the segment; the others open it by that name.
  char name[64] = {};
  if (node_rank == 0) {
    std::random_device entropy;
    std::snprintf(name, sizeof(name), "/nanodist-%d-%u", static_cast<int>(getpid()), static_cast<unsigned>(entropy()));
  }
  MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, node);

  bytes_ = sizeof(BoardHeader) + sizeof(RankSlot) * static_cast<std::size_t>(world_size_);
  int fd = node_rank == 0 ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : -1;
  bool created = fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes_)) == 0;
  int all_created = 0;
  int mine_ok = node_rank != 0 || created;
  MPI_Allreduce(&mine_ok, &all_created, 1, MPI_INT, MPI_LAND, node);
  if (!all_created) fail("could not create the watchdog's shared-memory board {}", name);
  if (node_rank != 0) fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0) fail("could not open the watchdog's shared-memory board {}", name);
  memory_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (memory_ == MAP_FAILED) fail("could not map the watchdog's shared-memory board {}", name);

  // ftruncate gave zeroed memory; every field's zero is its initial state.
  header_ = static_cast<BoardHeader*>(memory_);
  slots_ = reinterpret_cast<RankSlot*>(static_cast<char*>(memory_) + sizeof(BoardHeader));
  MPI_Barrier(node);
  if (node_rank == 0) {
    header_->world_size = world_size_;
    header_->aborting_rank = -1;
  }
  mine().started = process_start_time(getpid());
  mine().pid = getpid();
  mine().state = static_cast<std::int64_t>(RankState::running);
  MPI_Barrier(node);
  if (node_rank == 0) shm_unlink(name);  // the mappings stay; nothing is left behind in /dev/shm
  MPI_Comm_free(&node);
}

StatusBoard::~StatusBoard() {
  if (memory_ && memory_ != MAP_FAILED) munmap(memory_, bytes_);
}

std::int64_t StatusBoard::entered(int world_rank, std::int64_t comm_id) {
  for (auto& p : slot(world_rank).progress)
    if (p.comm_id.load() == comm_id) return p.entered.load();
  return -1;  // not in its table: none entered yet, a communicator it has freed, or one past the table's size
}

RankView StatusBoard::view(int world_rank, std::int64_t comm_id) {
  const std::int64_t now = now_ns();
  RankSlot& s = slot(world_rank);
  RankView v;
  v.world_rank = world_rank;
  v.pid = s.pid;
  if (v.pid == 0) return v;
  v.process = process_state(v.pid, s.started.load());
  v.state = static_cast<RankState>(s.state.load());
  v.entered = entered(world_rank, comm_id);
  v.current = s.current.view(now);
  v.last = s.last.view(now);
  const std::string leaving = unpack_text(s.leaving);
  std::memcpy(v.leaving, leaving.data(), std::min(leaving.size(), sizeof(v.leaving) - 1));
  return v;
}

void StatusBoard::count_entry(std::int64_t comm_id) {
  const std::lock_guard one_thread(progress_mutex_);  // the program's and the communication thread
  auto& table = mine().progress;
  for (auto& p : table) {
    if (p.comm_id.load() == comm_id) {
      p.entered.fetch_add(1);
      return;
    }
  }
  for (auto& p : table) {
    if (p.comm_id.load() == 0) {
      p.entered = 1;
      p.comm_id = comm_id;
      return;
    }
  }
  // More communicators than the table holds: the watchdog will call their progress unknown.
}

void StatusBoard::forget(std::int64_t comm_id) {
  const std::lock_guard one_thread(progress_mutex_);
  for (auto& p : mine().progress) {
    if (p.comm_id.load() == comm_id) {
      p.comm_id = 0;
      p.entered = 0;
    }
  }
}

namespace {

// What /proc/<pid>/stat says: the state letter and the start time; state 0 when it is gone.
// Async-signal-safe (the SIGTERM handler asks it): open()/read() into a stack buffer, no
// allocation — a handler that allocates while the rank was inside malloc deadlocks.
struct StatFields {
  char state = 0;
  std::int64_t started = 0;
};

StatFields read_stat(std::int64_t pid) {
  char path[40] = "/proc/";
  std::size_t n = 6;
  char digits[24];
  int k = 0;
  do digits[k++] = static_cast<char>('0' + pid % 10);
  while ((pid /= 10) > 0 && k < 23);
  while (k > 0) path[n++] = digits[--k];
  std::memcpy(path + n, "/stat", 6);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char text[512];  // "pid (name) S ...": the name is at most 64 bytes, the fields after it ~300
  const ssize_t got = read(fd, text, sizeof text);
  close(fd);
  if (got <= 0) return {};
  const char* paren = nullptr;  // the last ')': a name may contain one
  for (ssize_t i = 0; i < got; ++i)
    if (text[i] == ')') paren = text + i;
  const char* end = text + got;
  if (!paren || paren + 2 >= end) return {};
  StatFields fields{paren[2], 0};
  // Field 3 is the state; field 22 the start time: 19 spaces further on.
  const char* at = paren + 2;
  for (int spaces = 0; at < end && spaces < 19; ++at)
    if (*at == ' ') ++spaces;
  for (; at < end && *at >= '0' && *at <= '9'; ++at) fields.started = fields.started * 10 + (*at - '0');
  return fields;
}

}  // namespace

ProcessState process_state(std::int64_t pid, std::int64_t started) {
  const StatFields stat = read_stat(pid);
  if (stat.state == 0 || stat.state == 'Z' || stat.state == 'X') return ProcessState::gone;
  if (started != 0 && stat.started != started) return ProcessState::gone;  // the pid is another process's now
  return stat.state == 't' || stat.state == 'T' ? ProcessState::stopped : ProcessState::running;
}

bool process_alive(std::int64_t pid, std::int64_t started) { return process_state(pid, started) != ProcessState::gone; }

std::int64_t process_start_time(std::int64_t pid) { return read_stat(pid).started; }

}  // namespace comm
