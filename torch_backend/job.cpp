#include "torch_backend/job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/backends/registry.hpp"
#include "comm/cli_checks.hpp"
#include "comm/progress_thread.hpp"
#include "comm/runtime.hpp"
#include "torch_backend/deadline.hpp"
#include "torch_backend/process_group.hpp"

namespace nanodist_torch {
namespace {

// How often rank 0 looks for ompi-server's address file while it starts.
constexpr auto kServerAddressPause = std::chrono::milliseconds(10);

struct Job {
  std::unique_ptr<comm::Runtime> runtime;
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm meetings = MPI_COMM_NULL;  // the members of each new group meet here first (make_group)
  double timeout_s = 0;
  int rank = -1;
  int size = 0;
  pid_t rendezvous_server = 0;  // ompi-server, on rank 0 of a job started apart
  bool ended = false;
};
Job g_job;

std::vector<std::uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// The NANODIST_* variables, read and checked as every program's flags read them (comm/runtime).
comm::Options options_from_environment(std::chrono::milliseconds timeout) {
  comm::Options options;
  options.timeout_s = static_cast<double>(timeout.count()) / 1000.0;  // init_process_group(timeout=…)
  CLI::App app{"nanodist_torch"};
  comm::add_options(app, options);
  const char* argv[] = {"nanodist_torch"};
  comm::check_environment_switches();
  try {
    app.parse(1, argv);
  } catch (const CLI::ParseError& e) {
    throw comm::UsageError(fmt::format("nanodist: {}", comm::cli::readable(e)));
  }
  // Every call of a PyTorch program already runs on the communication thread: the library's
  // own progress setting has nothing to change here, so asking for the thread is refused
  // rather than ignored.
  if (options.progress == comm::Progress::thread)
    throw comm::UsageError("nanodist: NANODIST_PROGRESS=thread does nothing in a PyTorch program (every call already "
                           "runs on the communication thread); unset it");
  // Unset, the backend is the fastest correct one for where the ranks are: shm (shared memory
  // between the ranks of a host; across hosts, hierarchical). docs/pytorch.md, "Fast by default".
  if (std::getenv("NANODIST_BACKEND") == nullptr) options.backend = comm::BackendKind::shm;
  return options;
}

bool under_mpiexec() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr; }

// Rank 0 of a job started apart: Open MPI's rendezvous server, ended with this process
// (PR_SET_PDEATHSIG) or by end_job(). Returns its address.
std::string start_rendezvous_server(std::chrono::milliseconds timeout) {
  char path[] = "/tmp/nanodist-ompi-server-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) comm::fail("nanodist: cannot make a file in /tmp for ompi-server's address");
  close(fd);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) comm::fail("nanodist: fork for ompi-server failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    execlp("ompi-server", "ompi-server", "--no-daemonize", "-r", path, static_cast<char*>(nullptr));
    _exit(127);
  }
  g_job.rendezvous_server = pid;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::ifstream in(path);
    std::string uri;
    if (std::getline(in, uri) && !uri.empty()) {
      unlink(path);  // read once: nothing left in /tmp, whatever ends the job
      return uri;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      g_job.rendezvous_server = 0;
      unlink(path);
      comm::fail("nanodist: ompi-server (Open MPI's rendezvous server, from openmpi-bin) exited with status {} "
                 "before giving its address; launch with mpiexec instead",
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      unlink(path);
      comm::fail("nanodist: ompi-server gave no address in time");
    }
    std::this_thread::sleep_for(kServerAddressPause);
  }
}

// Joins `size` processes, each an MPI world of one, into one communicator ordered by `rank`.
MPI_Comm join_apart(c10d::Store& store, int rank, int size, std::chrono::milliseconds timeout) {
  if (rank == 0) store.set("nanodist/server", bytes_of(start_rendezvous_server(timeout)));
  const std::string server = text_of(store.get("nanodist/server"));
  setenv("OMPI_MCA_pmix_server_uri", server.c_str(), 1);  // read by MPI_Init
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);  // a failed join raises, not aborts
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

  char port[MPI_MAX_PORT_NAME] = {};
  if (rank == 0) {
    comm::check_mpi(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port");
    store.set("nanodist/port", bytes_of(port));
  }
  const std::string port_name = text_of(store.get("nanodist/port"));
  // The group so far (rank 0 alone at first) accepts the newcomers one at a time, in rank order:
  // rank k connects when rank 0 opens its turn (two connecting at once deadlock Open MPI 4.1's
  // connect/accept). Each merge puts the newcomer last, so the group ends ordered by rank.
  auto open_turn = [&](int k) {
    if (k < size) store.set(fmt::format("nanodist/turn/{}", k), bytes_of("1"));
  };
  MPI_Comm group = MPI_COMM_SELF;
  int members = 1;
  if (rank == 0) {
    open_turn(1);
  } else {
    store.get(fmt::format("nanodist/turn/{}", rank));
    MPI_Comm inter;
    comm::check_mpi(MPI_Comm_connect(port_name.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter), "MPI_Comm_connect");
    comm::check_mpi(MPI_Intercomm_merge(inter, 1, &group), "MPI_Intercomm_merge");
    MPI_Comm_free(&inter);
    members = rank + 1;
  }
  for (; members < size; ++members) {
    MPI_Comm inter, merged;
    comm::check_mpi(MPI_Comm_accept(port_name.c_str(), MPI_INFO_NULL, 0, group, &inter), "MPI_Comm_accept");
    comm::check_mpi(MPI_Intercomm_merge(inter, 0, &merged), "MPI_Intercomm_merge");
    MPI_Comm_free(&inter);
    if (group != MPI_COMM_SELF) MPI_Comm_free(&group);
    group = merged;
    if (rank == 0) open_turn(members + 1);
  }
  if (rank == 0) MPI_Close_port(port);
  MPI_Comm world;
  comm::check_mpi(MPI_Comm_split(group, 0, rank, &world), "MPI_Comm_split");
  if (group != MPI_COMM_SELF) MPI_Comm_free(&group);
  return world;
}

MPI_Comm join_under_mpiexec(int rank, int size) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  int mpi_rank = 0, mpi_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  if (mpi_size != size || mpi_rank != rank)
    throw comm::UsageError(fmt::format(
        "nanodist: mpiexec started this process as rank {} of {}, but init_process_group was given rank {} of {}: "
        "set RANK and WORLD_SIZE from OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (docs/pytorch.md)",
        mpi_rank, mpi_size, rank, size));
  return MPI_COMM_WORLD;
}

}  // namespace

void start_job(c10d::Store& store, int rank, int size, std::chrono::milliseconds timeout) {
  if (g_job.runtime) return;
  if (g_job.ended) throw comm::UsageError("nanodist: the job has ended in this process (MPI cannot start twice)");
  comm::Options options = options_from_environment(timeout);  // bad values: before MPI starts
  options.handle_signals = false;  // Python's Ctrl-C stays Python's
  options.progress = comm::Progress::caller;  // every call already runs on the communication thread
  {
    // Joining waits for the other processes in blocking MPI calls: a process that never comes
    // (or dies meanwhile) ends this one at the deadline instead of leaving it waiting.
    g_job.timeout_s = options.timeout_s;
    Deadline deadline(options.timeout_s, fmt::format("rank {}: joining the job of {} processes", rank, size));
    g_job.world =
        under_mpiexec() || size == 1 ? join_under_mpiexec(rank, size) : join_apart(store, rank, size, timeout);
    comm::check_mpi(MPI_Comm_dup(g_job.world, &g_job.meetings), "MPI_Comm_dup");
  }
  g_job.rank = rank;
  g_job.size = size;
  g_job.runtime = std::make_unique<comm::Runtime>(g_job.world);
  g_job.runtime->start(options);
}

bool job_started() { return g_job.runtime != nullptr; }

double job_timeout_s() { return g_job.timeout_s; }

namespace {

// The members of a new group meet before the blocking MPI calls that make its communicator
// (MPI_Comm_create_group, the communicator's lanes): the first member hears from every other,
// then answers each, under the watchdog like a collective — so a member that never calls
// new_group is named at the deadline (or at once, if it has left) instead of hanging the rest.
void meet(const std::vector<int>& members, std::int64_t id, const std::string& name) {
  const auto me = std::find(members.begin(), members.end(), g_job.rank) - members.begin();
  comm::OpCall call;
  call.kind = comm::OpKind::split;
  call.comm_id = id + 2;  // (not the group's id: its first collective is #0 there)
  call.comm_name = name;
  call.members = &members;
  call.comm_rank = static_cast<int>(me);
  call.on_communication_thread = true;
  comm::OpScope scope(call);
  comm::watchdog().count_entry(call.comm_id);
  const int tag = static_cast<int>(id % 32768);
  std::vector<int> tokens(members.size(), 0);
  std::vector<MPI_Request> requests;
  auto exchange = [&](bool receive, int peer, int& token) {
    MPI_Request request;
    comm::check_mpi(receive ? MPI_Irecv(&token, 1, MPI_INT, peer, tag, g_job.meetings, &request)
                            : MPI_Isend(&token, 1, MPI_INT, peer, tag, g_job.meetings, &request),
                    "group meeting");
    requests.push_back(request);
  };
  auto wait = [&] {
    comm::watchdog().wait_all(static_cast<int>(requests.size()), requests.data());
    requests.clear();
  };
  if (me == 0) {
    for (std::size_t k = 1; k < members.size(); ++k) exchange(true, members[k], tokens[k]);
    wait();
    for (std::size_t k = 1; k < members.size(); ++k) exchange(false, members[k], tokens[k]);
    wait();
  } else {
    exchange(false, members[0], tokens[0]);
    wait();
    exchange(true, members[0], tokens[0]);
    wait();
  }
  comm::watchdog().forget(call.comm_id);
}

}  // namespace

std::unique_ptr<comm::Communicator> make_group(const std::vector<std::int64_t>& world_ranks, const std::string& name) {
  comm::Communicator& world = g_job.runtime->world();
  std::vector<int> ranks(world_ranks.begin(), world_ranks.end());
  if (ranks.empty())
    for (int r = 0; r < world.size(); ++r) ranks.push_back(r);
  // Ids are odd and the same on every member: a hash of the group's name (the world is 1).
  const std::int64_t id = static_cast<std::int64_t>(std::hash<std::string>{}("torch:" + name) & 0x3FFFFFFFFFFFFFFFull) | 1;
  meet(ranks, id, "new_group " + name);
  // Everyone is here: the blocking calls below find every member (a deadline all the same).
  Deadline deadline(g_job.timeout_s, fmt::format("rank {}: making the communicator of {}", g_job.rank, name));
  MPI_Group world_group, group;
  MPI_Comm_group(g_job.world, &world_group);
  MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group);
  MPI_Comm created;
  comm::check_mpi(MPI_Comm_create_group(g_job.world, group, static_cast<int>(id % 32768), &created),
                  "MPI_Comm_create_group");
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  const comm::BackendSettings& settings = g_job.runtime->backend_settings();
  return std::make_unique<comm::Communicator>(created, name, id,
                                              comm::make_backend(g_job.runtime->options().backend, settings), settings);
}

void end_job(const std::string& why) {
  if (!g_job.runtime) return;
  comm::watchdog().note_leaving(why);  // a rank that still waits for this one names the reason
  withdraw_pending_receives();
  comm::ProgressThread::get().finish_polls();  // sends still in flight go (or are reported) first
  g_job.runtime->shut_down();  // every rank has arrived: nobody waits for anyone any more
  if (g_job.meetings != MPI_COMM_NULL) MPI_Comm_free(&g_job.meetings);
  g_job.runtime.reset();
  g_job.ended = true;
  if (g_job.rendezvous_server == 0 && g_job.world == MPI_COMM_WORLD) {
    MPI_Finalize();
    return;
  }
  // Processes joined by connect/accept: Open MPI 4.1's MPI_Finalize waits to disconnect from
  // every process it was connected to, and hangs once some of them have left (seen with 3
  // ranks). Every rank has passed the last meeting, so each leaves without it.
  if (g_job.rendezvous_server > 0) {
    kill(g_job.rendezvous_server, SIGTERM);
    waitpid(g_job.rendezvous_server, nullptr, 0);
  }
}

}  // namespace nanodist_torch
