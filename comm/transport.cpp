#include "comm/transport.hpp"

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
  return request;
}

void Transport::wait_all(std::vector<MPI_Request>& requests) const {
  if (!requests.empty()) watchdog().wait_all(static_cast<int>(requests.size()), requests.data());
  requests.clear();
}

void Transport::send(const void* data, std::size_t count, DataType type, int dest) const {
  MPI_Request request = isend(data, count, type, dest);
  watchdog().wait_all(1, &request);
}

void Transport::recv(void* data, std::size_t count, DataType type, int source) const {
  MPI_Request request = irecv(data, count, type, source);
  watchdog().wait_all(1, &request);
}

void Transport::send_recv(const void* send_data, std::size_t send_count, int dest, void* recv_data,
                          std::size_t recv_count, int source, DataType type) const {
  MPI_Request requests[2] = {irecv(recv_data, recv_count, type, source), isend(send_data, send_count, type, dest)};
  watchdog().wait_all(2, requests);
}

}  // namespace comm
