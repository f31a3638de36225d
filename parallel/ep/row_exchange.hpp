// The all-to-all of expert parallelism, as an op on the tape: each rank sends a run of rows to
// every rank of the group and receives one from each (MPI_Alltoallv of [rows, C] blocks).
//
//   forward:   rows [N,C], send_rows[j] of them to rank j (back to back, in rank order)
//              → [M,C], recv_rows[i] from rank i (back to back, in rank order)
//   backward:  the same exchange the other way: the gradient of the received rows goes back to
//              the rank that sent them, into the sent rows' gradient
//
// Every rank of the group must call it, in the same order, in forward and again in backward —
// also a rank that sends and receives no rows. So it records its backward whenever gradients
// are on, whether or not its input needs one (a rank with nothing to send still receives in
// backward): otherwise one rank's tape would hold an exchange its peers' did not, and they
// would wait for each other.
#pragma once
#include <cstdint>
#include <span>

#include "comm/communicator.hpp"
#include "nn/tensor.hpp"

namespace parallel {

// `name` labels the exchange in --trace ("dispatch"; its backward "dispatch's gradient");
// `seconds` (may be null) gains the time of each exchange, forward and backward.
nn::Tensor exchange_rows(const nn::Tensor& rows, std::span<const int64_t> send_rows, std::span<const int64_t> recv_rows,
                         comm::Communicator& group, const char* name, double* seconds = nullptr);

}  // namespace parallel
