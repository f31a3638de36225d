#include "comm/host_split.hpp"

#include <cstring>
#include <vector>

#include "comm/error.hpp"

namespace comm {

MPI_Comm split_by_host(MPI_Comm comm, int key) {
  int rank = 0, size = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  check_mpi(MPI_Get_processor_name(host, &length), "MPI_Get_processor_name");
  std::vector<char> hosts(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  check_mpi(MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm),
            "MPI_Allgather");
  // The color of a host: the first rank on it.
  int color = rank;
  for (int r = 0; r < rank; ++r)
    if (std::strncmp(hosts.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME, host,
                     MPI_MAX_PROCESSOR_NAME) == 0) {
      color = r;
      break;
    }
  MPI_Comm node;
  check_mpi(MPI_Comm_split(comm, color, key, &node), "MPI_Comm_split");
  return node;
}

}  // namespace comm
