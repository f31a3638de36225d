#include "comm/transport.hpp"

#include <algorithm>
#include <climits>

#include "comm/error.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace comm {

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail("{} failed: {}", what, std::string(text, static_cast<std::size_t>(length)));
}

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::f32:
      return MPI_FLOAT;
    case DataType::f64:
      return MPI_DOUBLE;
    case DataType::i32:
      return MPI_INT32_T;
    case DataType::i64:
      return MPI_INT64_T;
    case DataType::bf16:
      return MPI_UINT16_T;  // moved as bits; the mpi backend reduces it with its own MPI_Op
    case DataType::u8:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::prod:
      return MPI_PROD;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::band:
      return MPI_BAND;
    case ReduceOp::bor:
      return MPI_BOR;
    case ReduceOp::bxor:
      return MPI_BXOR;
  }
  return MPI_OP_NULL;
}

namespace {
int as_mpi_count(std::size_t count) {
  if (count > static_cast<std::size_t>(INT_MAX)) fail("message of {} elements exceeds MPI's int count", count);
  return static_cast<int>(count);
}
}  // namespace

MPI_Request Transport::isend(const void* data, std::size_t count, DataType type, int dest) const {
  MPI_Request request;
  check_mpi(MPI_Isend(data, as_mpi_count(count), mpi_type(type), dest, tag_, comm_, &request), "MPI_Isend");
  return request;
}

MPI_Request Transport::irecv(void* data, std::size_t count, DataType type, int source) const {
  MPI_Request request;
  check_mpi(MPI_Irecv(data, as_mpi_count(count), mpi_type(type), source, tag_, comm_, &request), "MPI_Irecv");
  posted_.push_back({request, count * size_of(type)});
  return request;
}

void Transport::wait(int n, MPI_Request* requests) const {
  if (n == 0) return;
  // The handles before the wait (completion sets each to MPI_REQUEST_NULL), to find the receives.
  handles_.assign(requests, requests + n);
  statuses_.resize(static_cast<std::size_t>(n));
  watchdog().wait_all(n, requests, statuses_.data());
  check_received();
}

bool Transport::test_all(std::vector<MPI_Request>& requests) const {
  const int n = static_cast<int>(requests.size());
  handles_ = requests;
  statuses_.resize(requests.size());
  int done = 0;
  watchdog().check_completion(MPI_Testall(n, requests.data(), &done, statuses_.data()), n, statuses_.data(),
                              "MPI_Testall");
  if (!done) return false;
  check_received();
  requests.clear();
  return true;
}

void Transport::check_received() const {
  for (std::size_t i = 0; i < handles_.size(); ++i) {
    auto receive = std::find_if(posted_.begin(), posted_.end(),
                                [&](const PostedReceive& p) { return p.request == handles_[i]; });
    if (receive == posted_.end()) continue;  // a send
    int received = 0;
    MPI_Get_count(&statuses_[i], MPI_BYTE, &received);
    if (static_cast<std::size_t>(received) != receive->bytes)
      watchdog().sizes_disagree(statuses_[i].MPI_SOURCE, receive->bytes, static_cast<std::size_t>(received));
    posted_.erase(receive);
  }
}

void Transport::wait_all(std::vector<MPI_Request>& requests) const {
  wait(static_cast<int>(requests.size()), requests.data());
  requests.clear();
}

void Transport::send(const void* data, std::size_t count, DataType type, int dest) const {
  MPI_Request request = isend(data, count, type, dest);
  wait(1, &request);
}

void Transport::recv(void* data, std::size_t count, DataType type, int source) const {
  MPI_Request request = irecv(data, count, type, source);
  wait(1, &request);
}

void Transport::send_recv(const void* send_data, std::size_t send_count, int dest, void* recv_data,
                          std::size_t recv_count, int source, DataType type) const {
  MPI_Request requests[2] = {irecv(recv_data, recv_count, type, source), isend(send_data, send_count, type, dest)};
  wait(2, requests);
}

}  // namespace comm
