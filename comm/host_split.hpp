// Which ranks share a machine: the node communicators of the status board, the watchdog's
// exchange, the shm backend and the runtime's local ranks.
#pragma once

#include <mpi.h>

namespace comm {

// A new communicator of the ranks of `comm` that run on this host, ordered by `key`. Ranks are
// grouped by host name (MPI's processor name). Under one mpiexec that is what
// MPI_COMM_TYPE_SHARED gives; processes started apart (torchrun, PyTorch's tests) and joined
// with connect/accept are each their own node to MPI_Comm_split_type in Open MPI 4.1, and so
// would never share memory or a status board. Collective over `comm`; the caller frees it.
MPI_Comm split_by_host(MPI_Comm comm, int key);

}  // namespace comm
