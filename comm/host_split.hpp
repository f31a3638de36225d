// Which ranks share a machine: the node communicators of the status board, the watchdog's
// exchange, the shm backend and the runtime's local ranks.
#pragma once

#include <mpi.h>

namespace comm {

// A new communicator of the ranks of `comm` that share this host — its shared memory and its
// process table — ordered by `key`. Ranks are grouped by what they see of the machine: the
// host name, the kernel's boot id, the process-id namespace and /dev/shm itself. Under one
// mpiexec that is what MPI_COMM_TYPE_SHARED gives; processes started apart (torchrun,
// PyTorch's tests) and joined with connect/accept are each their own node to
// MPI_Comm_split_type in Open MPI 4.1, and so would never share memory or a status board; and
// containers that share a host name but not /dev/shm or their pids stay apart here.
// Collective over `comm`; the caller frees the result.
MPI_Comm split_by_host(MPI_Comm comm, int key);

}  // namespace comm
