// comm_bench: nccl-tests for the comm library. Sweeps message sizes for one collective and
// one or several backends, checks every result, and prints nccl-tests' table.
//
//   mpiexec -n 2 comm_bench --op allreduce --backend ring -b 8 -e 256M -f 2
//   mpiexec -n 4 comm_bench --op allgather --compare mpi,ring -b 1M -e 64M -f 4 --csv out.csv
//   mpiexec -n 1 comm_bench --device cuda --compare nccl,mpi,ring -b 1K -e 1G -f 4   # GPU memory
//
// As in nccl-tests, each row has two column groups, out of place and in place (where the
// collective has both forms; --out-of-place or --in-place keeps one). With --compare, the
// backends run interleaved size by size, and each row ends with every
// backend's speed relative to the first one: on a shared, noisy machine only ratios from
// one run are worth quoting.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/backends/registry.hpp"
#include "bench_harness.hpp"
#include "comm/cli_checks.hpp"
#include "comm/device_memory.hpp"
#include "comm/runtime.hpp"

namespace {

using comm::Communicator;

struct Settings {
  comm::Options comm;
  std::string operation = "allreduce";
  std::string begin = "8", end = "64M";
  double factor = 2;
  int iterations = 20, warmup = 5;
  std::string type = "float", op = "sum";
  int root = 0;
  bool in_place = false, out_of_place = false;  // neither: both forms, as nccl-tests
  std::vector<std::string> compare;
  std::string csv;
  std::string device = "cpu";  // cuda: the buffers are device memory (nccl's only kind)
  bool with_memcpy = false;    // memcpy columns: one rank alone copying the size, and every rank at once (the ceilings)
};

struct Result {
  double mean_us = 0, min_us = 0, max_us = 0;
  double algbw = 0, busbw = 0;  // GB/s
  std::size_t wrong = 0;
};

// Buffers as the collective expects them, holding this rank's inputs.
template <class T>
void prepare(Communicator& comm, const bench::Case& c, const bench::Shape& s, std::vector<T>& send,
             std::vector<T>& recv) {
  send.assign(s.send, T{});
  bench::fill_inputs<T>(c, comm.rank(), std::span(send));
  recv.assign(s.recv, T{});
  if (!c.in_place) return;
  using In = bench::InPlaceInput;
  const In input = c.collective->in_place_input;
  if (input == In::recv || (input == In::recv_on_root && comm.rank() == c.root))
    bench::fill_inputs<T>(c, comm.rank(), std::span(recv));
  if (input == In::own_block)  // this rank's block where the gathered buffer keeps it
    std::copy(send.begin(), send.end(), recv.begin() + static_cast<std::ptrdiff_t>(s.per_rank * comm.rank()));
}

// The buffers the collective runs on: the host vectors, or (--device cuda) device copies of them.
template <class T>
class Buffers {
 public:
  Buffers(std::vector<T>& send, std::vector<T>& recv, bool device) : send_(send), recv_(recv) {
    if (!device) return;
    send_device_.emplace(send.size() * sizeof(T));
    recv_device_.emplace(recv.size() * sizeof(T));
  }
  void load() {  // the host vectors' contents onto the device
    if (!send_device_) return;
    comm::copy_memory(send_device_->data(), send_.data(), send_.size() * sizeof(T));
    comm::copy_memory(recv_device_->data(), recv_.data(), recv_.size() * sizeof(T));
  }
  void fetch_result() {  // the device's result into recv (to check it)
    if (recv_device_) comm::copy_memory(recv_.data(), recv_device_->data(), recv_.size() * sizeof(T));
  }
  std::span<T> send() {
    return send_device_ ? std::span<T>(static_cast<T*>(send_device_->data()), send_.size()) : send_;
  }
  std::span<T> recv() {
    return recv_device_ ? std::span<T>(static_cast<T*>(recv_device_->data()), recv_.size()) : recv_;
  }
  bench::CallBuffers call() { return {send().data(), send_.size(), recv().data(), recv_.size()}; }

 private:
  std::vector<T>&send_, &recv_;
  std::optional<comm::DeviceBuffer> send_device_, recv_device_;
};

template <class T>
Result measure(Communicator& comm, Communicator& clock, const bench::Case& c, std::size_t bytes,
               const Settings& settings) {
  const bench::Shape s = c.collective->shape(bytes, c.type, comm.size(), comm.rank(), c.root);
  std::vector<T> send, recv;
  prepare(comm, c, s, send, recv);
  Buffers<T> buffers(send, recv, settings.device == "cuda");

  // Correctness first: one run on known inputs, every element checked (on the host, after the
  // device's result is copied back).
  buffers.load();
  c.collective->run(comm, c, buffers.call());
  buffers.fetch_result();
  std::int64_t wrong = static_cast<std::int64_t>(bench::count_wrong<T>(c, comm.rank(), comm.size(), s.per_rank, recv));
  prepare(comm, c, s, send, recv);
  buffers.load();

  for (int i = 0; i < settings.warmup; ++i) c.collective->run(comm, c, buffers.call());
  clock.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < settings.iterations; ++i) c.collective->run(comm, c, buffers.call());
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
                    std::max(1, settings.iterations);

  // Every rank's time: mean, min, max; wrong elements summed over ranks.
  double sum = 0, lo = 0, hi = 0;
  clock.allreduce(std::span<const double>(&us, 1), std::span(&sum, 1), comm::ReduceOp::sum);
  clock.allreduce(std::span<const double>(&us, 1), std::span(&lo, 1), comm::ReduceOp::min);
  clock.allreduce(std::span<const double>(&us, 1), std::span(&hi, 1), comm::ReduceOp::max);
  clock.allreduce(std::span(&wrong, 1), comm::ReduceOp::sum);

  Result r;
  r.mean_us = sum / comm.size();
  r.min_us = lo;
  r.max_us = hi;
  const double reported_bytes = static_cast<double>(s.reported * comm::size_of(c.type));
  r.algbw = r.mean_us > 0 ? reported_bytes / (r.mean_us * 1e-6) / 1e9 : 0;
  r.busbw = r.algbw * c.collective->bus_factor(comm.size());
  r.wrong = static_cast<std::size_t>(wrong);
  return r;
}

Result measure_any(Communicator& comm, Communicator& clock, const bench::Case& c, std::size_t bytes,
                   const Settings& s) {
  Result r;
  bench::with_element_type(c.type, [&]<class T>() { r = measure<T>(comm, clock, c, bytes, s); });
  return r;
}

// Refuses, on every rank alike, a largest size whose buffers (send, receive, and the inputs
// kept for checking) do not fit in this rank's share of the machine's memory.
void check_memory(Communicator& world, const bench::Case& c, std::size_t bytes) {
  const bench::Shape s = c.collective->shape(bytes, c.type, world.size(), world.rank(), c.root);
  std::array<double, 2> need_and_budget{static_cast<double>((s.send + 2 * s.recv) * comm::size_of(c.type)),
                                        -comm::available_memory_bytes() / comm::runtime().local_size()};
  world.allreduce(std::span<double>(need_and_budget), comm::ReduceOp::max);  // the largest need, the smallest budget
  const double need = need_and_budget[0], budget = -need_and_budget[1];
  if (budget > 0 && need > budget)
    throw comm::UsageError(
        fmt::format("-e {} B: the largest size needs {:.3g} GiB of buffers per rank, but a rank's "
                    "share of the available memory is {:.3g} GiB: pick a smaller -e",
                    bytes, need / (1 << 30), budget / (1 << 30)));
}

// The forms to measure (in place?), as nccl-tests' two column groups: both where the collective
// has both, unless --in-place or --out-of-place asks for one; a form it lacks is a usage error.
std::vector<bool> forms_to_run(const bench::Collective& collective, const Settings& settings) {
  if (settings.in_place && !collective.has_in_place_form())
    throw comm::UsageError(fmt::format(
        "--in-place: {} has no in-place form (allreduce, reduce, allgather and broadcast have)", collective.name));
  if (settings.out_of_place && !collective.out_of_place)
    throw comm::UsageError(fmt::format("--out-of-place: {} has only the in-place form", collective.name));
  const bool either = !settings.in_place && !settings.out_of_place;
  std::vector<bool> forms;
  if ((either || settings.out_of_place) && collective.out_of_place) forms.push_back(false);
  if ((either || settings.in_place) && collective.has_in_place_form()) forms.push_back(true);
  return forms;
}

// The table's three header lines: backends, forms (out-of-place : in-place), column names.
// Each form's group is nccl-tests' four columns; the speed columns compare each backend with
// the first, per form.
std::vector<std::string> table_header(const std::vector<std::string>& backends, const std::vector<bool>& forms,
                                      bool with_memcpy) {
  const auto form_name = [](bool in_place) { return in_place ? "in-place" : "out-of-place"; };
  const std::string group_columns = fmt::format("{:>10} {:>8} {:>8} {:>6}", "time(us)", "algbw", "busbw", "#wrong");
  const std::size_t group_width = group_columns.size(), block_width = forms.size() * (group_width + 3) - 3;
  std::string backend_line = fmt::format("{:>46}", ""), form_line = backend_line;
  std::string columns = fmt::format("{:>12} {:>12} {:>7} {:>6} {:>5}", "size", "count", "type", "redop", "root");
  for (const auto& name : backends) {
    backend_line += fmt::format(" | {:^{}}", name, block_width);
    for (std::size_t f = 0; f < forms.size(); ++f) {
      form_line += fmt::format(" {} {:^{}}", f == 0 ? '|' : ':', form_name(forms[f]), group_width);
      columns += fmt::format(" {} {}", f == 0 ? '|' : ':', group_columns);
    }
  }
  for (std::size_t k = 1; k < backends.size(); ++k) {
    backend_line += fmt::format(" | {:^{}}", backends[k] + "/" + backends[0], forms.size() * 7 - 1);
    form_line += " |";
    columns += " |";
    for (bool in_place : forms) {
      form_line += fmt::format(" {:>6}", in_place ? "in" : "out");
      columns += fmt::format(" {:>6}", "speed");
    }
  }
  if (with_memcpy) {
    backend_line += " | memcpy, 1 rank | memcpy, all ranks";
    form_line += " |                 |";
    columns += fmt::format(" | {:>8} {:>6} | {:>8} {:>6}", "GB/s", "best/", "GB/s", "best/");
  }
  // '#' takes the first column's place; centred names leave trailing blanks.
  const auto commented = [](const std::string& line) { return "#" + line.substr(1, line.find_last_not_of(' ')); };
  return {commented(backend_line), commented(form_line), commented(columns)};
}

// What the command line asks for, checked the same way on every rank.
struct Plan {
  bench::Case c;
  std::vector<std::size_t> sizes;
  std::vector<bool> forms;            // in place?
  std::vector<std::string> backends;  // the first is the one the others are compared with
  std::string redop;                  // the table's redop column ("none" without one)
  int root = -1;                      // the table's root column (-1 without one)
};

Plan plan_of(const Settings& settings, int ranks) {
  Plan p;
  p.c.collective = &bench::collective(settings.operation);
  p.c.type = comm::parse_datatype(settings.type);
  p.c.op = comm::parse_reduce_op(settings.op);
  p.c.root = settings.root;
  if (p.c.root < 0 || p.c.root >= ranks)
    throw comm::UsageError(fmt::format("--root {} is not a rank of this {}-rank job", p.c.root, ranks));
  try {
    p.sizes = bench::size_sweep(bench::parse_size(settings.begin), bench::parse_size(settings.end), settings.factor);
  } catch (const comm::Error& e) {
    throw comm::UsageError(e.what());
  }
  p.forms = forms_to_run(*p.c.collective, settings);
  p.backends = settings.compare.empty() ? std::vector<std::string>{std::string(comm::name_of(settings.comm.backend))}
                                        : settings.compare;
  p.redop = p.c.collective->uses_reduce_op() ? settings.op : "none";
  p.root = p.c.collective->uses_root() ? p.c.root : -1;
  return p;
}

void say_header(const Plan& p, const Settings& settings, const std::vector<Communicator>& comms) {
  const int ranks = comms.front().size();
  comm::say("# comm_bench: {} on {} ranks, {} memory, type {}, redop {}, root {}, {}, {} iterations after {} warm-up",
            p.c.collective->name, ranks, settings.device == "cuda" ? "device (cuda)" : "host", settings.type, p.redop,
            p.root,
            p.forms.size() == 2 ? "out of place and in place"
            : p.forms[0]        ? "in place"
                                : "out of place",
            settings.iterations, settings.warmup);
  comm::say(
      "# time: mean over ranks of the time per iteration (min and max over ranks: --csv); algbw = size / time; "
      "busbw = algbw × {:.3g}",
      p.c.collective->bus_factor(ranks));
  for (const Communicator& c : comms)  // how the backend moves data here, where it depends on that
    if (c.backend_description() != c.backend_name()) comm::say("# {}", c.backend_description());
  for (const std::string& line : table_header(p.backends, p.forms, settings.with_memcpy)) comm::say("{}", line);
}

// --csv: one line per size, backend and form (rank 0 writes).
class CsvFile {
 public:
  CsvFile(const std::string& path, int rank) {
    if (path.empty() || rank != 0) return;
    out_.open(path);
    if (!out_) throw comm::UsageError(fmt::format("cannot write '{}'", path));
    out_ << "operation,backend,ranks,size_bytes,count,type,redop,root,in_place,time_us,time_us_min,time_us_max,"
            "algbw_GBps,busbw_GBps,wrong\n";
  }
  void add(const Plan& p, const std::string& backend, int ranks, const bench::Shape& s, const Settings& settings,
           bool in_place, const Result& r) {
    if (!out_) return;
    out_ << fmt::format("{},{},{},{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.4f},{:.4f},{}\n", p.c.collective->name,
                        backend, ranks, s.reported * comm::size_of(p.c.type), s.reported, settings.type, p.redop,
                        p.root, in_place ? 1 : 0, r.mean_us, r.min_us, r.max_us, r.algbw, r.busbw, r.wrong);
  }

 private:
  std::ofstream out_;
};

// One row of the table: every backend and form at one size, then each backend's speed
// relative to the first. results: [backend][form].
// --memcpy: memcpy's GB/s at a size, one rank copying alone and every rank copying at once
// (ranks on one memory system share its bandwidth: the second is the ceiling of a collective).
struct MemcpyCeiling {
  double alone = 0, together = 0;
};

std::string row_text(const Plan& p, const bench::Shape& s, const Settings& settings, const std::vector<Result>& results,
                     MemcpyCeiling memcpy) {
  std::string row = fmt::format("{:>12} {:>12} {:>7} {:>6} {:>5}", s.reported * comm::size_of(p.c.type), s.reported,
                                settings.type, p.redop, p.root);
  const std::size_t forms = p.forms.size();
  for (std::size_t k = 0; k < results.size(); ++k) {
    const Result& r = results[k];
    row += fmt::format(" {} {:>10.2f} {:>8.2f} {:>8.2f} {:>6}", k % forms == 0 ? '|' : ':', r.mean_us, r.algbw, r.busbw,
                       r.wrong);
  }
  for (std::size_t k = 1; k < p.backends.size(); ++k) {
    row += " |";
    for (std::size_t f = 0; f < forms; ++f) {
      const Result &first = results[f], &other = results[k * forms + f];
      row += fmt::format(" {:>5.2f}x", other.mean_us > 0 ? first.mean_us / other.mean_us : 0.0);
    }
  }
  if (settings.with_memcpy) {  // the best busbw of any backend and form, as a fraction of memcpy's
    double best = 0;
    for (const Result& r : results) best = std::max(best, r.busbw);
    for (double gbps : {memcpy.alone, memcpy.together})
      row += fmt::format(" | {:>8.2f} {:>6.2f}", gbps, gbps > 0 ? best / gbps : 0.0);
  }
  return row;
}

// --memcpy: memcpy of `bytes` by rank 0 alone (the others wait), then by every rank at once;
// each the median of `iterations` copies after one that touches the pages, and for "at once"
// the slowest rank's: docs/benchmarks.md's ceilings, measured in the same run as the collectives.
MemcpyCeiling memcpy_ceiling(Communicator& clock, std::size_t bytes, int iterations) {
  MemcpyCeiling ceiling;
  if (bytes == 0) return ceiling;
  std::vector<char> from(bytes, 1), to(bytes, 0);
  std::memcpy(to.data(), from.data(), bytes);
  const auto median_gbps = [&](bool copying, bool in_step) {
    std::vector<double> times;
    for (int i = 0; i < iterations && copying; ++i) {
      if (in_step) clock.barrier();
      const auto start = std::chrono::steady_clock::now();
      std::memcpy(to.data(), from.data(), bytes);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (!copying) return 0.0;
    std::nth_element(times.begin(), times.begin() + iterations / 2, times.end());
    return static_cast<double>(bytes) / times[static_cast<std::size_t>(iterations / 2)] / 1e9;
  };
  ceiling.alone = median_gbps(clock.rank() == 0, false);
  clock.broadcast(std::span(&ceiling.alone, 1), 0);
  ceiling.together = median_gbps(true, true);
  clock.allreduce(std::span(&ceiling.together, 1), comm::ReduceOp::min);
  return ceiling;
}

void run(comm::Runtime& runtime, const Settings& settings) {
  Communicator& world = runtime.world();
  Plan p = plan_of(settings, world.size());
  // Timing, checking and the memory check are host work: over mpi, whatever is measured.
  Communicator clock = world.with_backend(comm::BackendKind::mpi);
  check_memory(clock, p.c, p.sizes.back());  // the backends take turns on buffers of the same size
  if (settings.device == "cuda") comm::select_device(runtime.local_rank(), "--device cuda");
  for (const auto& name : p.backends)
    if (name == "nccl" && settings.device != "cuda")
      throw comm::UsageError("--backend nccl works on device memory: add --device cuda");
  std::vector<Communicator> comms;
  for (const auto& name : p.backends) comms.push_back(world.with_backend(comm::parse_backend(name)));
  say_header(p, settings, comms);
  CsvFile csv(settings.csv, world.rank());

  std::size_t total_wrong = 0;
  std::vector<double> busbw_sum(comms.size(), 0.0);  // over sizes and forms
  int measured = 0;
  std::vector<std::size_t> skipped;
  for (std::size_t bytes : p.sizes) {
    const bench::Shape s = p.c.collective->shape(bytes, p.c.type, world.size(), 0, p.c.root);
    if (s.per_rank == 0 && bytes > 0) {  // e.g. 8 B of reduce_scatter on 3 ranks: nothing would move
      skipped.push_back(bytes);
      continue;
    }
    ++measured;
    std::vector<Result> results;
    for (std::size_t k = 0; k < comms.size(); ++k) {  // interleaved: every backend at this size, then the next size
      for (bool in_place : p.forms) {
        p.c.in_place = in_place;
        results.push_back(measure_any(comms[k], clock, p.c, bytes, settings));
        total_wrong += results.back().wrong;
        busbw_sum[k] += results.back().busbw;
        csv.add(p, p.backends[k], world.size(), s, settings, in_place, results.back());
      }
    }
    MemcpyCeiling ceiling;
    if (settings.with_memcpy) {
      ceiling = memcpy_ceiling(clock, bytes, settings.iterations);
      Result alone, together;
      alone.algbw = alone.busbw = ceiling.alone;
      together.algbw = together.busbw = ceiling.together;
      csv.add(p, "memcpy", world.size(), s, settings, false, alone);
      csv.add(p, "memcpy_all_ranks", world.size(), s, settings, false, together);
    }
    comm::say("{}", row_text(p, s, settings, results, ceiling));
  }
  if (!skipped.empty())
    comm::say("# skipped {} B: less than one {} element per rank on {} ranks", fmt::join(skipped, " B, "),
              settings.type, world.size());
  comm::say("# wrong elements in all: {}", total_wrong);
  const double rows = static_cast<double>(measured) * static_cast<double>(p.forms.size());
  for (std::size_t k = 0; k < comms.size(); ++k)  // nccl-tests' closing line: busbw averaged over sizes and forms
    comm::say("# Avg bus bandwidth    : {:.4f} GB/s{}", rows > 0 ? busbw_sum[k] / rows : 0.0,
              comms.size() > 1 ? fmt::format(" ({})", p.backends[k]) : std::string());
  if (total_wrong > 0)
    throw comm::Error(fmt::format("{} wrong elements: a backend computed a wrong result", total_wrong));
}

}  // namespace

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{
        "comm_bench: bandwidth and latency of one collective over a sweep of message sizes (nccl-tests style)"};
    Settings s;
    comm::add_options(app, s.comm);
    app.add_option("--op", s.operation, "collective")
        ->check(CLI::IsMember(bench::collective_names()))
        ->capture_default_str();
    app.add_option("-b,--minbytes", s.begin, "first message size (8, 1K, 256M, ...)")->capture_default_str();
    app.add_option("-e,--maxbytes", s.end, "last message size")->capture_default_str();
    app.add_option("-f,--stepfactor", s.factor, "multiply the size by this each step")
        ->check(comm::cli::real(1.0, 1e6))
        ->capture_default_str();
    app.add_option("-n,--iters", s.iterations, "timed iterations per size")
        ->check(comm::cli::whole(1, 1000000))
        ->capture_default_str();
    app.add_option("-w,--warmup_iters", s.warmup, "untimed iterations first")
        ->check(comm::cli::whole(0, 1000000))
        ->capture_default_str();
    app.add_option("-d,--datatype", s.type, "element type")
        ->check(CLI::IsMember({"float", "double", "int32", "int64", "bf16"}))
        ->capture_default_str();
    app.add_option("-o,--op_type", s.op, "reduction")
        ->check(CLI::IsMember({"sum", "prod", "min", "max", "avg"}))
        ->capture_default_str();
    app.add_option("-r,--root", s.root, "root rank")->check(comm::cli::whole(0))->capture_default_str();
    app.add_flag("--in-place", s.in_place,
                 "only the in-place form (allreduce, reduce, allgather, broadcast); without this flag or "
                 "--out-of-place, both forms side by side");
    app.add_flag("--out-of-place", s.out_of_place, "only the out-of-place form");
    app.add_option("--compare", s.compare, "backends to run side by side, e.g. mpi,ring,naive")
        ->delimiter(',')
        ->check(comm::backend_check());
    app.add_option("--csv", s.csv, "also write the results to this CSV file");
    app.add_flag("--memcpy", s.with_memcpy,
                 "add memcpy's GB/s at each size (one rank alone, and every rank at once) and the best busbw as a "
                 "fraction of each");
    app.add_option("--device", s.device, "where the buffers live: cpu, or cuda (GPU memory; the CPU backends stage it)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    comm::parse(app, argc, argv);
    runtime.start(s.comm);
    run(runtime, s);
  });
}
