#include "comm/host_split.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "comm/error.hpp"

namespace comm {
namespace {

constexpr std::size_t kKeyBytes = 512;

// "host|boot id|pid namespace|/dev/shm's device and inode": equal for two processes exactly
// when they can share memory through /dev/shm and see each other's pids.
std::string machine_key() {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  check_mpi(MPI_Get_processor_name(host, &length), "MPI_Get_processor_name");
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  struct stat pid_namespace = {}, shm = {};
  stat("/proc/self/ns/pid", &pid_namespace);
  stat("/dev/shm", &shm);
  std::string key = std::string(host) + "|" + boot_id + "|" + std::to_string(pid_namespace.st_ino) + "|" +
                    std::to_string(shm.st_dev) + ":" + std::to_string(shm.st_ino);
  key.resize(kKeyBytes - 1);  // (padded with zeros; a longer one cut: the host name leads it)
  return key;
}

}  // namespace

MPI_Comm split_by_host(MPI_Comm comm, int key) {
  int rank = 0, size = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const std::string mine = machine_key();
  std::vector<char> keys(static_cast<std::size_t>(size) * kKeyBytes);
  check_mpi(MPI_Allgather(mine.c_str(), kKeyBytes, MPI_CHAR, keys.data(), kKeyBytes, MPI_CHAR, comm), "MPI_Allgather");
  // The color of a machine: the first rank on it.
  int color = rank;
  for (int r = 0; r < rank; ++r)
    if (std::strncmp(keys.data() + static_cast<std::size_t>(r) * kKeyBytes, mine.c_str(), kKeyBytes) == 0) {
      color = r;
      break;
    }
  MPI_Comm node;
  check_mpi(MPI_Comm_split(comm, color, key, &node), "MPI_Comm_split");
  return node;
}

}  // namespace comm
