#include "comm/transport.hpp"

#include <algorithm>
#include <climits>

#include <fmt/format.h>

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
  posted_.push_back({request, count, type});
  return request;
}

std::vector<Transport::PostedReceive>::iterator Transport::posted_receive(MPI_Request handle) const {
  return std::find_if(posted_.begin(), posted_.end(), [&](const PostedReceive& p) { return p.request == handle; });
}

bool Transport::poll(int n, MPI_Request* requests) const {
  // The handles as posted: completion sets each to MPI_REQUEST_NULL (MPI_Testall changes none
  // until all are done), and the receives among them are found by their handles.
  handles_.assign(requests, requests + n);
  statuses_.resize(static_cast<std::size_t>(n));
  int done = 0;
  const int code = MPI_Testall(n, requests, &done, statuses_.data());
  if (code != MPI_SUCCESS) {
    for (std::size_t i = 0; i < handles_.size(); ++i) {  // MPI_ERR_IN_STATUS: each request's own error
      int error_class = MPI_SUCCESS;
      MPI_Error_class(code == MPI_ERR_IN_STATUS ? statuses_[i].MPI_ERROR : code, &error_class);
      if (error_class != MPI_ERR_TRUNCATE) continue;
      auto receive = posted_receive(handles_[i]);
      if (receive != posted_.end()) report_other_size(*receive, statuses_[i], true);
    }
    watchdog().check_completion(code, n, statuses_.data(), "MPI_Testall");  // any other error
  }
  if (!done) return false;
  for (std::size_t i = 0; i < handles_.size(); ++i) {
    auto receive = posted_receive(handles_[i]);
    if (receive == posted_.end()) continue;  // a send
    MPI_Count bytes = 0;
    MPI_Get_elements_x(&statuses_[i], MPI_BYTE, &bytes);
    if (static_cast<std::size_t>(bytes) != receive->count * size_of(receive->type))
      report_other_size(*receive, statuses_[i], false);
    posted_.erase(receive);
  }
  return true;
}

void Transport::report_other_size(const PostedReceive& receive, const MPI_Status& status, bool longer) const {
  // The sender by its world rank (this transport's communicator may be a subset: shm's ring
  // across nodes), for the watchdog to name it in the call's own ranks.
  MPI_Group mine, world;
  MPI_Comm_group(comm_, &mine);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int world_rank = MPI_UNDEFINED;
  MPI_Group_translate_ranks(mine, 1, &status.MPI_SOURCE, world, &world_rank);
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  const std::size_t expected = receive.count * size_of(receive.type);
  MPI_Count bytes = 0;
  MPI_Get_elements_x(&status, MPI_BYTE, &bytes);
  watchdog().sizes_disagree(world_rank, longer ? fmt::format("more than {} bytes", expected)
                                               : fmt::format("{} bytes", static_cast<long long>(bytes)),
                            expected);
}

void Transport::wait(int n, MPI_Request* requests) const {
  if (n > 0) watchdog().wait_until([&] { return poll(n, requests); });
}

bool Transport::test_all(std::vector<MPI_Request>& requests) const {
  if (!poll(static_cast<int>(requests.size()), requests.data())) return false;
  requests.clear();
  return true;
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
