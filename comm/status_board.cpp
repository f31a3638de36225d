#include "comm/status_board.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <new>
#include <random>

#include "comm/error.hpp"

namespace comm {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void OpRecord::set_name(std::string_view name) {
  char packed[sizeof(std::uint64_t) * 6] = {};
  std::memcpy(packed, name.data(), std::min(name.size(), sizeof(packed) - 1));
  for (std::size_t i = 0; i < comm_name.size(); ++i) {
    std::uint64_t word;
    std::memcpy(&word, packed + 8 * i, 8);
    comm_name[i].store(word, std::memory_order_relaxed);
  }
}

std::string OpRecord::name() const {
  char packed[sizeof(std::uint64_t) * 6 + 1] = {};
  for (std::size_t i = 0; i < comm_name.size(); ++i) {
    std::uint64_t word = comm_name[i].load(std::memory_order_relaxed);
    std::memcpy(packed + 8 * i, &word, 8);
  }
  return std::string(packed);
}

StatusBoard::StatusBoard(MPI_Comm world) {
  check_mpi(MPI_Comm_rank(world, &world_rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(world, &world_size_), "MPI_Comm_size");
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
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
  return slot(world_rank).pid.load() == 0 ? -1 : 0;
}

void StatusBoard::count_entry(std::int64_t comm_id) {
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
  for (auto& p : mine().progress) {
    if (p.comm_id.load() == comm_id) {
      p.comm_id = 0;
      p.entered = 0;
    }
  }
}

bool process_alive(std::int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  auto paren = text.rfind(')');  // "pid (name) S ..."
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  char state = text[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace comm
