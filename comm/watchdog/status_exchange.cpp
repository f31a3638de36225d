#include "comm/watchdog/status_exchange.hpp"
#include "comm/host_split.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "comm/error.hpp"

namespace comm {
namespace {

constexpr std::uint32_t kMagic = 0x6e647778;  // "ndwx"
enum class Kind : std::uint32_t { request = 1, reply = 2, interrupted = 3 };

// Where a rank listens: its port, on each IPv4 address of its machine.
struct Endpoint {
  std::uint32_t addresses[4] = {};  // network byte order
  std::int32_t address_count = 0;
  std::uint16_t port = 0;  // network byte order
};

// This machine's IPv4 addresses other than loopback (loopback only when there is nothing else).
std::vector<std::uint32_t> machine_addresses() {
  std::vector<std::uint32_t> found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      const std::uint32_t address = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
      if (address != htonl(INADDR_LOOPBACK)) found.push_back(address);
    }
    freeifaddrs(list);
  }
  if (found.empty()) found.push_back(htonl(INADDR_LOOPBACK));  // never otherwise: it would reach this machine
  return found;
}

}  // namespace

// Every datagram starts with this; a reply is followed by `views` RankViews.
struct StatusExchange::Header {
  std::uint32_t magic = kMagic;
  Kind kind = Kind::request;
  std::uint64_t job = 0;       // a number drawn at start: datagrams of other jobs are ignored
  std::int64_t comm_id = 0;    // the communicator asked about
  std::int32_t from_rank = 0;  // world rank of the sender
  std::int32_t views = 0;
};

StatusExchange::StatusExchange(MPI_Comm world, StatusBoard& board) : board_(board) {
  int size = 0;
  MPI_Comm_rank(world, &me_);
  MPI_Comm_size(world, &size);

  // A node is named by its first world rank; every rank learns every rank's node and host.
  MPI_Comm node;
  node = split_by_host(world, me_);
  int leader = me_;
  MPI_Bcast(&leader, 1, MPI_INT, 0, node);
  MPI_Comm_free(&node);
  std::vector<int> leaders(static_cast<std::size_t>(size));
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(host, &length);
  std::vector<char> all_hosts(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all_hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, world);
  std::map<int, int> index_of_leader;
  node_of_.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    auto [it, added] = index_of_leader.emplace(leaders[r], static_cast<int>(index_of_leader.size()));
    if (added) hosts_.emplace_back(&all_hosts[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
    node_of_[r] = it->second;
  }
  node_count_ = static_cast<int>(hosts_.size());
  if (node_count_ == 1) return;  // the board sees everything: nothing to ask

  // One UDP socket per rank, for questions and answers. Not MPI: a question may go to a rank
  // that is dead, and OpenMPI, asked to send to a dead peer over TCP, stalls and warns
  // ("failed to TCP connect") instead of failing the send; a datagram to a dead port is lost.
  socket_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t any_size = sizeof any;
  Endpoint mine;
  if (socket_ >= 0 && bind(socket_, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0 &&
      getsockname(socket_, reinterpret_cast<sockaddr*>(&any), &any_size) == 0) {
    mine.port = any.sin_port;
    for (std::uint32_t address : machine_addresses())
      if (mine.address_count < 4) mine.addresses[mine.address_count++] = address;
  }  // else: port 0, and this rank can neither ask nor be asked (its node says "no answer")
  endpoints_.resize(static_cast<std::size_t>(size) * sizeof(Endpoint));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, endpoints_.data(), sizeof mine, MPI_BYTE, world);
  if (me_ == 0) job_ = std::random_device{}() * 0x100000001ull + static_cast<std::uint64_t>(getpid());
  MPI_Bcast(&job_, 1, MPI_UINT64_T, 0, world);

  // Everything the interrupt notice needs, ready now: a signal handler may not allocate.
  const auto* endpoints = reinterpret_cast<const Endpoint*>(endpoints_.data());
  for (int r = 0; r < size; ++r) {
    if (same_node(r) || endpoints[r].port == 0) continue;
    for (int a = 0; a < endpoints[r].address_count; ++a) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = endpoints[r].port;
      to.sin_addr.s_addr = endpoints[r].addresses[a];
      notice_targets_.push_back(to);
    }
  }
}

void StatusExchange::announce_interrupt() noexcept {
  if (socket_ < 0) return;
  Header notice;
  notice.kind = Kind::interrupted;
  notice.job = job_;
  notice.from_rank = me_;
  for (const sockaddr_in& to : notice_targets_)  // sendto is async-signal-safe
    sendto(socket_, &notice, sizeof notice, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&to), sizeof to);
}

StatusExchange::~StatusExchange() {
  if (socket_ >= 0) close(socket_);
}

std::optional<StatusExchange::Header> StatusExchange::receive() {
  if (buffer_.empty()) buffer_.resize(kMaxDatagram);
  sockaddr_in from{};
  socklen_t from_size = sizeof from;
  received_ =
      recvfrom(socket_, buffer_.data(), buffer_.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &from_size);
  if (received_ < static_cast<ssize_t>(sizeof(Header))) return std::nullopt;  // nothing (EAGAIN), or a stray
  Header header;
  std::memcpy(&header, buffer_.data(), sizeof header);
  if (header.magic != kMagic || header.job != job_ || header.from_rank < 0 ||
      header.from_rank >= static_cast<int>(node_of_.size())) {
    Header stray;
    stray.magic = 0;
    return stray;
  }  // not this job's: ignored
  if (header.kind == Kind::request) answer(header, from);
  if (header.kind == Kind::interrupted) interrupt_seen_ = true;
  return header;
}

void StatusExchange::answer(const Header& request, const sockaddr_in& to) {
  // This node's board as it stands: every rank here (a dead one's slot still says what it did last).
  Header reply = request;
  reply.kind = Kind::reply;
  reply.from_rank = me_;
  std::vector<RankView> views;
  for (int r = 0; r < static_cast<int>(node_of_.size()); ++r)
    if (same_node(r)) views.push_back(board_.view(r, request.comm_id));
  reply.views = static_cast<std::int32_t>(views.size());
  std::vector<char> datagram(sizeof reply + views.size() * sizeof(RankView));
  std::memcpy(datagram.data(), &reply, sizeof reply);
  std::memcpy(datagram.data() + sizeof reply, views.data(), views.size() * sizeof(RankView));
  sendto(socket_, datagram.data(), datagram.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
}

void StatusExchange::serve() {
  if (socket_ < 0) return;
  // Answers questions; an answer that comes after its question was given up is dropped.
  while (receive()) {
  }
}

namespace {
// How often a lingering rank answers other nodes' questions, and how often a reporter looks
// for their answers: a question is a few hundred bytes, answered within a few milliseconds.
constexpr auto kServePause = std::chrono::milliseconds(5);
constexpr auto kAnswerPause = std::chrono::milliseconds(1);
}  // namespace

void StatusExchange::serve_for(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    serve();
    std::this_thread::sleep_for(kServePause);
  }
}

std::map<int, RankView> StatusExchange::ask(const std::vector<int>& world_ranks, std::int64_t comm_id,
                                            double budget_s) {
  std::map<int, RankView> answers;
  std::set<int> waiting_for;  // nodes not yet answered
  for (int w : world_ranks)
    if (!same_node(w)) waiting_for.insert(node_of_[w]);
  if (waiting_for.empty() || socket_ < 0) return answers;

  // Ask every rank of those nodes, on each of its addresses: any one that is listening
  // answers for its whole node.
  Header request;
  request.job = job_;
  request.comm_id = comm_id;
  request.from_rank = me_;
  const auto* endpoints = reinterpret_cast<const Endpoint*>(endpoints_.data());
  for (int r = 0; r < static_cast<int>(node_of_.size()); ++r) {
    const Endpoint& e = endpoints[r];
    if (!waiting_for.count(node_of_[r]) || e.port == 0) continue;
    for (int a = 0; a < e.address_count; ++a) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = e.port;
      to.sin_addr.s_addr = e.addresses[a];
      sendto(socket_, &request, sizeof request, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    }
  }

  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget_s);
  while (!waiting_for.empty() && std::chrono::steady_clock::now() < until) {
    // Questions (another node's reporter may be asking this one now) are answered in receive().
    const std::optional<Header> header = receive();
    if (!header) {
      std::this_thread::sleep_for(kAnswerPause);
      continue;
    }
    const std::size_t expected = sizeof *header + static_cast<std::size_t>(header->views) * sizeof(RankView);
    if (header->kind != Kind::reply || header->comm_id != comm_id || static_cast<std::size_t>(received_) != expected)
      continue;
    if (!waiting_for.erase(node_of_[header->from_rank])) continue;  // that node has answered already
    for (std::int32_t i = 0; i < header->views; ++i) {
      RankView v;
      std::memcpy(&v, buffer_.data() + sizeof *header + static_cast<std::size_t>(i) * sizeof v, sizeof v);
      answers[static_cast<int>(v.world_rank)] = v;
    }
  }
  return answers;
}

}  // namespace comm
