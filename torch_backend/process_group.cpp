#include "torch_backend/process_group.hpp"

#include <ATen/ATen.h>
#include <mpi.h>
#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string_view>

#include "comm/progress_thread.hpp"

namespace nanodist_torch {
namespace {

using comm::ProgressThread;

using c10d::OpType;

// The library's element types; the rest (uint8, int8, int16, float16, bool) only move as bytes.
bool library_has(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kInt || t == at::kLong || t == at::kBFloat16;
}

// Calls f(T{}) with the C++ type the library uses for tensors of type t (library_has(t)).
template <class F>
void with_element_type(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat:
      return f(float{});
    case at::kDouble:
      return f(double{});
    case at::kInt:
      return f(std::int32_t{});
    case at::kLong:
      return f(std::int64_t{});
    case at::kBFloat16:
      return f(comm::bfloat16{});
    default:
      TORCH_CHECK(false, "nanodist: no element type for ", t);
  }
}

template <class T>
std::span<T> span_of(const at::Tensor& t) {
  return {static_cast<T*>(t.data_ptr()), static_cast<std::size_t>(t.numel())};
}

comm::ReduceOp reduce_op(const c10d::ReduceOp& op, const char* call) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return comm::ReduceOp::sum;
    case c10d::ReduceOp::AVG:
      return comm::ReduceOp::avg;
    case c10d::ReduceOp::PRODUCT:
      return comm::ReduceOp::prod;
    case c10d::ReduceOp::MIN:
      return comm::ReduceOp::min;
    case c10d::ReduceOp::MAX:
      return comm::ReduceOp::max;
    default:
      TORCH_CHECK(false, "nanodist: ", call, " does not support this ReduceOp (BAND, BOR, BXOR and PREMUL_SUM are not "
                  "built; SUM, AVG, PRODUCT, MIN and MAX are)");
  }
}

void require_cpu(const at::Tensor& t, const char* call) {
  TORCH_CHECK(t.device().is_cpu(), "nanodist: ", call, " takes CPU tensors, got one on ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided && !t.is_quantized() && !t.is_mkldnn(), "nanodist: ", call,
              " takes dense (strided) tensors, got layout ", t.layout());
}

void require_one(const std::vector<at::Tensor>& tensors, const char* call) {
  TORCH_CHECK(tensors.size() == 1, "nanodist: ", call, " takes one tensor per call, got ", tensors.size());
  require_cpu(tensors[0], call);
}

void require_reducible(const at::Tensor& t, const char* call) {
  TORCH_CHECK(library_has(t.scalar_type()), "nanodist: ", call, " does not support tensors of type ", t.scalar_type(),
              " (it reduces float32, float64, bfloat16, int32 and int64)");
}

void require_like(const at::Tensor& t, const at::Tensor& model, const char* call, const char* what) {
  require_cpu(t, call);
  TORCH_CHECK(t.scalar_type() == model.scalar_type() && t.numel() == model.numel(), "nanodist: ", call, ": ", what,
              " must have the input's type and size (", model.scalar_type(), ", ", model.numel(), " elements), got ",
              t.scalar_type(), ", ", t.numel());
}

// A tensor as the library moves it: contiguous, of a type the library has. A type it lacks
// (in a call that only moves bytes) travels as its bytes in int32 words, padded up.
at::Tensor movable(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  if (library_has(c.scalar_type())) return c;
  const std::int64_t bytes = c.numel() * static_cast<std::int64_t>(c.element_size());
  at::Tensor words = at::zeros({(bytes + 3) / 4}, at::kInt);
  if (bytes > 0) words.view(at::kByte).narrow(0, 0, bytes).copy_(c.reshape({-1}).view(at::kByte));
  return words;
}

// Writes what movable(t) gave back into t, where it was a copy.
void put_back(const at::Tensor& t, const at::Tensor& moved) {
  if (moved.is_same(t)) return;
  if (moved.scalar_type() == t.scalar_type()) {
    t.copy_(moved.view(t.sizes()));
    return;
  }
  const std::int64_t bytes = t.numel() * static_cast<std::int64_t>(t.element_size());
  at::Tensor c = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
  if (bytes > 0) c.reshape({-1}).view(at::kByte).copy_(moved.view(at::kByte).narrow(0, 0, bytes));
  t.copy_(c);
}

// `parts` (equal tensors) laid end to end in one movable buffer, and back.
at::Tensor joined(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> moved;
  for (const auto& p : parts) moved.push_back(movable(p).reshape({-1}));
  return at::cat(moved);
}
void split_into(const at::Tensor& whole, const std::vector<at::Tensor>& parts) {
  const std::int64_t block = parts.empty() ? 0 : whole.numel() / static_cast<std::int64_t>(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i)
    put_back(parts[i], whole.narrow(0, static_cast<std::int64_t>(i) * block, block));
}

// The allgather every all_gather form runs: `in` from every rank, end to end, in one buffer.
at::Tensor gathered(comm::Communicator& c, const at::Tensor& in) {
  const at::Tensor send = movable(in);
  at::Tensor recv = at::empty({send.numel() * c.size()}, send.options());
  with_element_type(send.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    c.allgather(std::span<const T>(span_of<T>(send)), span_of<T>(recv));
  });
  return recv;
}

// The reduce_scatter both forms run: `send` (size() blocks, movable) reduced, this rank's block into `out`.
void reduce_scatter_into(comm::Communicator& c, const at::Tensor& send, const at::Tensor& out, comm::ReduceOp op) {
  at::Tensor recv = movable(out);
  with_element_type(recv.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    c.reduce_scatter(std::span<const T>(span_of<T>(send)), span_of<T>(recv), op);
  });
  put_back(out, recv);
}

// NANODIST_TORCH_OVERLAP=0 makes every call wait for its collective before returning, as a
// blocking backend would: nothing overlaps. For measuring what the communication thread hides.
bool overlapped() {
  static const bool on = [] {
    const char* text = std::getenv("NANODIST_TORCH_OVERLAP");
    if (!text || std::string_view(text) == "1" || std::string_view(text).empty()) return true;
    TORCH_CHECK(std::string_view(text) == "0", "nanodist: NANODIST_TORCH_OVERLAP='", text, "' is not 0 or 1");
    return false;
  }();
  return on;
}

}  // namespace

NanodistWork::NanodistWork(OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(-1, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void NanodistWork::complete() {
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

void NanodistWork::fail(std::exception_ptr error) {
  future_->setErrorIfNeeded(error);  // (a callback of a completed future may be what threw)
  finish(error);
}

ProcessGroupNanodist::ProcessGroupNanodist(int rank, int size, std::unique_ptr<comm::Communicator> communicator)
    : c10d::ProcessGroup(rank, size), communicator_(std::move(communicator)) {}

ProcessGroupNanodist::~ProcessGroupNanodist() {
  // The communicator is freed on the communication thread, after the calls queued before. Once
  // the program has ended MPI (at exit), it is left as it is: MPI can free nothing any more.
  auto last = std::make_shared<std::shared_ptr<comm::Communicator>>(std::move(communicator_));
  auto keep = [](const std::shared_ptr<std::shared_ptr<comm::Communicator>>& c) {
    new std::shared_ptr<comm::Communicator>(std::move(*c));  // NOLINT: kept on purpose
  };
  if (!ProgressThread::get().post([last, keep] {
        int ended = 0;
        MPI_Finalized(&ended);
        if (ended) keep(last); else last->reset();
      }))
    keep(last);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::enqueue(OpType type, std::vector<at::Tensor> outputs,
                                                             std::function<void(comm::Communicator&)> body) {
  return enqueue(type, std::move(outputs),
                 [body = std::move(body)](comm::Communicator& c, NanodistWork&) { body(c); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::enqueue(
    OpType type, std::vector<at::Tensor> outputs, std::function<void(comm::Communicator&, NanodistWork&)> body) {
  const bool overlap = overlapped();
  auto work = c10::make_intrusive<NanodistWork>(type, std::move(outputs));
  std::shared_ptr<comm::Communicator> communicator = communicator_;
  auto task = [work, communicator, body = std::move(body)] {
    // The results are written in place, as torch.distributed's own backends write them: no
    // autograd recording (a parameter that requires grad can be broadcast into).
    at::NoGradGuard no_grad;
    try {
      body(*communicator, *work);
      if (!work->deferred()) work->complete();
    } catch (...) {
      work->fail(std::current_exception());
    }
  };
  // A future's callback runs on the communication thread; a collective it calls (PyTorch's
  // PowerSGD hook does) runs there at once, in the same place on every rank, instead of
  // queuing behind the task that waits for it.
  if (ProgressThread::get().on_thread()) {
    task();
    return work;
  }
  TORCH_CHECK(ProgressThread::get().post(std::move(task)),
              "nanodist: the communication thread has ended (the program is exiting)");
  if (!overlap) work->wait();  // NANODIST_TORCH_OVERLAP=0: each call returns when it is done
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  require_one(tensors, "broadcast");
  const at::Tensor t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(OpType::BROADCAST, tensors, [t, root](comm::Communicator& c) {
    at::Tensor moved = movable(t);
    with_element_type(moved.scalar_type(), [&](auto tag) { c.broadcast(span_of<decltype(tag)>(moved), root); });
    put_back(t, moved);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  require_one(tensors, "all_reduce");
  require_reducible(tensors[0], "all_reduce");
  const comm::ReduceOp op = reduce_op(opts.reduceOp, "all_reduce");
  const at::Tensor t = tensors[0];
  return enqueue(OpType::ALLREDUCE, tensors, [t, op](comm::Communicator& c) {
    at::Tensor moved = movable(t);
    with_element_type(moved.scalar_type(), [&](auto tag) { c.allreduce(span_of<decltype(tag)>(moved), op); });
    put_back(t, moved);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                         const c10d::AllreduceCoalescedOptions& opts) {
  for (const auto& t : tensors) {
    require_cpu(t, "all_reduce_coalesced");
    require_reducible(t, "all_reduce_coalesced");
  }
  const comm::ReduceOp op = reduce_op(opts.reduceOp, "all_reduce_coalesced");
  return enqueue(OpType::ALLREDUCE_COALESCED, tensors, [tensors, op](comm::Communicator& c) {
    for (const auto& t : tensors) {  // one allreduce each: the tensors may differ in type
      at::Tensor moved = movable(t);
      with_element_type(moved.scalar_type(), [&](auto tag) { c.allreduce(span_of<decltype(tag)>(moved), op); });
      put_back(t, moved);
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  require_one(tensors, "reduce");
  require_reducible(tensors[0], "reduce");
  const comm::ReduceOp op = reduce_op(opts.reduceOp, "reduce");
  const at::Tensor t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(OpType::REDUCE, tensors, [t, op, root](comm::Communicator& c) {
    at::Tensor moved = movable(t);
    with_element_type(moved.scalar_type(), [&](auto tag) { c.reduce(span_of<decltype(tag)>(moved), op, root); });
    put_back(t, moved);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllgatherOptions&) {
  require_one(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<std::size_t>(getSize()),
              "nanodist: all_gather needs one output list of ", getSize(), " tensors");
  for (const auto& o : outputs[0]) require_like(o, inputs[0], "all_gather", "every output");
  const at::Tensor in = inputs[0];
  const std::vector<at::Tensor> outs = outputs[0];
  return enqueue(OpType::ALLGATHER, outs, [in, outs](comm::Communicator& c) {
    split_into(gathered(c, in), outs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::AllgatherOptions&) {
  require_cpu(input, "_allgather_base");
  require_cpu(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * getSize(),
              "nanodist: _allgather_base: the output must hold ", getSize(), " × the input (", input.numel(),
              " elements of ", input.scalar_type(), "), got ", output.numel(), " of ", output.scalar_type());
  const at::Tensor in = input, out = output;
  return enqueue(OpType::_ALLGATHER_BASE, {output}, [in, out](comm::Communicator& c) {
    put_back(out, gathered(c, in));  // (copied into out whatever its layout)
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                         std::vector<at::Tensor>& inputs,
                                                                         const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == static_cast<std::size_t>(getSize()), "nanodist: all_gather_coalesced needs ",
              getSize(), " output lists, got ", outputs.size());
  for (const auto& t : inputs) require_cpu(t, "all_gather_coalesced");
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "nanodist: all_gather_coalesced: each output list needs ",
                inputs.size(), " tensors");
    for (std::size_t i = 0; i < inputs.size(); ++i) require_like(list[i], inputs[i], "all_gather_coalesced", "outputs");
  }
  std::vector<at::Tensor> flat_outputs;
  for (const auto& list : outputs) flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  const std::vector<std::vector<at::Tensor>> outs = outputs;
  const std::vector<at::Tensor> ins = inputs;
  return enqueue(OpType::ALLGATHER_COALESCED, flat_outputs, [ins, outs](comm::Communicator& c) {
    for (std::size_t i = 0; i < ins.size(); ++i) {
      std::vector<at::Tensor> column;
      for (const auto& list : outs) column.push_back(list[i]);
      split_into(gathered(c, ins[i]), column);
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::GatherOptions& opts) {
  require_one(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < getSize(), "nanodist: gather: root ", root, " is not a rank of this group of ",
              getSize());
  std::vector<at::Tensor> outs;
  if (getRank() == root) {
    TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<std::size_t>(getSize()),
                "nanodist: gather needs, on the root, one output list of ", getSize(), " tensors");
    for (const auto& o : outputs[0]) require_like(o, inputs[0], "gather", "every output");
    outs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "nanodist: gather: only the root passes outputs");
  }
  const at::Tensor in = inputs[0];
  return enqueue(OpType::GATHER, outs, [in, outs, root](comm::Communicator& c) {
    const at::Tensor send = movable(in);
    at::Tensor recv = at::empty({c.rank() == root ? send.numel() * c.size() : 0}, send.options());
    with_element_type(send.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      c.gather(std::span<const T>(span_of<T>(send)), span_of<T>(recv), root);
    });
    if (c.rank() == root) split_into(recv, outs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ScatterOptions& opts) {
  require_one(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < getSize(), "nanodist: scatter: root ", root, " is not a rank of this group of ",
              getSize());
  std::vector<at::Tensor> ins;
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(getSize()),
                "nanodist: scatter needs, on the root, one input list of ", getSize(), " tensors");
    for (const auto& i : inputs[0]) require_like(i, outputs[0], "scatter", "every input");
    ins = inputs[0];
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), "nanodist: scatter: only the root passes inputs");
  }
  const at::Tensor out = outputs[0];
  return enqueue(OpType::SCATTER, outputs, [ins, out, root](comm::Communicator& c) {
    at::Tensor recv = movable(out);
    const at::Tensor send = c.rank() == root ? joined(ins) : at::empty({0}, recv.options());
    with_element_type(recv.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      c.scatter(std::span<const T>(span_of<T>(send)), span_of<T>(recv), root);
    });
    put_back(out, recv);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                                    const c10d::ReduceScatterOptions& opts) {
  require_one(outputs, "reduce_scatter");
  require_reducible(outputs[0], "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(getSize()),
              "nanodist: reduce_scatter needs one input list of ", getSize(), " tensors");
  for (const auto& i : inputs[0]) require_like(i, outputs[0], "reduce_scatter", "every input");
  const comm::ReduceOp op = reduce_op(opts.reduceOp, "reduce_scatter");
  const at::Tensor out = outputs[0];
  const std::vector<at::Tensor> ins = inputs[0];
  return enqueue(OpType::REDUCE_SCATTER, outputs, [ins, out, op](comm::Communicator& c) {
    reduce_scatter_into(c, joined(ins), out, op);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                          const c10d::ReduceScatterOptions& opts) {
  require_cpu(input, "_reduce_scatter_base");
  require_cpu(output, "_reduce_scatter_base");
  require_reducible(input, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * getSize(),
              "nanodist: _reduce_scatter_base: the input must hold ", getSize(), " × the output (", output.numel(),
              " elements of ", output.scalar_type(), "), got ", input.numel(), " of ", input.scalar_type());
  const comm::ReduceOp op = reduce_op(opts.reduceOp, "_reduce_scatter_base");
  const at::Tensor in = input, out = output;
  return enqueue(OpType::_REDUCE_SCATTER_BASE, {output}, [in, out, op](comm::Communicator& c) {
    reduce_scatter_into(c, movable(in), out, op);
  });
}

namespace {

// Each rank sends send_parts[p] to rank p and receives recv_parts[p] from it: n − 1 paired
// steps (step k: to rank + k, from rank − k), so no two ranks wait on each other.
void exchange_all(comm::Communicator& c, const std::vector<at::Tensor>& send_parts,
                  const std::vector<at::Tensor>& recv_parts) {
  const int n = c.size(), me = c.rank();
  put_back(recv_parts[static_cast<std::size_t>(me)], movable(send_parts[static_cast<std::size_t>(me)]));
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n, from = (me - k + n) % n;
    const at::Tensor out = movable(send_parts[static_cast<std::size_t>(to)]);
    at::Tensor in = movable(recv_parts[static_cast<std::size_t>(from)]);
    with_element_type(out.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      c.send_recv(std::span<const T>(span_of<T>(out)), to, span_of<T>(in), from);
    });
    put_back(recv_parts[static_cast<std::size_t>(from)], in);
  }
}

std::vector<at::Tensor> split_by(const at::Tensor& t, const std::vector<int64_t>& sizes, int n, const char* what) {
  const at::Tensor rows = t.dim() == 0 ? t.reshape({1}) : t;
  std::vector<int64_t> lengths = sizes;
  if (lengths.empty()) {
    TORCH_CHECK(rows.size(0) % n == 0, "nanodist: all_to_all: the ", what, "'s first dimension (", rows.size(0),
                ") does not split into ", n, " equal parts; give split sizes");
    lengths.assign(static_cast<std::size_t>(n), rows.size(0) / n);
  }
  TORCH_CHECK(lengths.size() == static_cast<std::size_t>(n), "nanodist: all_to_all: ", lengths.size(), " ", what,
              " split sizes for ", n, " ranks");
  std::vector<at::Tensor> parts;
  std::int64_t start = 0;
  for (const auto length : lengths) {
    TORCH_CHECK(length >= 0 && start + length <= rows.size(0), "nanodist: all_to_all: the ", what,
                " split sizes exceed its first dimension (", rows.size(0), ")");
    parts.push_back(rows.narrow(0, start, length));
    start += length;
  }
  return parts;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                   std::vector<int64_t>& output_split_sizes,
                                                                   std::vector<int64_t>& input_split_sizes,
                                                                   const c10d::AllToAllOptions&) {
  require_cpu(input, "all_to_all");
  require_cpu(output, "all_to_all");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "nanodist: all_to_all: input and output types differ");
  std::vector<at::Tensor> ins = split_by(input, input_split_sizes, getSize(), "input");
  std::vector<at::Tensor> outs = split_by(output, output_split_sizes, getSize(), "output");
  const auto me = static_cast<std::size_t>(getRank());
  TORCH_CHECK(ins[me].numel() == outs[me].numel(), "nanodist: all_to_all: this rank sends itself ", ins[me].numel(),
              " elements but expects ", outs[me].numel());
  return enqueue(OpType::ALLTOALL_BASE, {output},
                 [ins, outs](comm::Communicator& c) { exchange_all(c, ins, outs); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::alltoall(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllToAllOptions&) {
  TORCH_CHECK(outputs.size() == static_cast<std::size_t>(getSize()) &&
                  inputs.size() == static_cast<std::size_t>(getSize()),
              "nanodist: all_to_all needs ", getSize(), " input and output tensors");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    require_cpu(inputs[i], "all_to_all");
    require_cpu(outputs[i], "all_to_all");
    TORCH_CHECK(inputs[i].scalar_type() == outputs[i].scalar_type(), "nanodist: all_to_all: types differ");
  }
  const auto me = static_cast<std::size_t>(getRank());
  TORCH_CHECK(inputs[me].numel() == outputs[me].numel(), "nanodist: all_to_all: this rank sends itself ",
              inputs[me].numel(), " elements but expects ", outputs[me].numel());
  const std::vector<at::Tensor> ins = inputs, outs = outputs;
  return enqueue(OpType::ALLTOALL, outputs, [ins, outs](comm::Communicator& c) { exchange_all(c, ins, outs); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::send(std::vector<at::Tensor>& tensors, int dst, int) {
  require_one(tensors, "send");
  TORCH_CHECK(dst != getRank(), "nanodist: send to this rank itself (", dst, ") would wait forever");
  const at::Tensor t = tensors[0];
  // The send is posted and the thread goes on to the next call (a receive, typically): two
  // ranks that each isend to the other before they irecv do not wait for each other. Its Work
  // completes when the message has gone, checked between the thread's tasks.
  return enqueue(OpType::SEND, tensors, [t, dst, keep = communicator_](comm::Communicator& c, NanodistWork& work) {
    const at::Tensor moved = movable(t);
    auto sent = std::make_shared<comm::Work>();
    with_element_type(moved.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      *sent = c.send_async(std::span<const T>(span_of<T>(moved)), dst);
    });
    if (sent->test()) return;
    work.defer_completion();
    const std::int64_t deadline = comm::now_ns() + static_cast<std::int64_t>(comm::watchdog().timeout_s() * 1e9);
    ProgressThread::get().keep_polling(
        [sent, moved, keep, deadline, done = c10::intrusive_ptr<NanodistWork>::reclaim_copy(&work)] {
          try {
            if (!sent->test()) {
              if (comm::now_ns() < deadline) return false;
              sent->wait();  // past the deadline: the watchdog's report, and the end of the job
            }
            done->complete();
          } catch (...) {
            done->fail(std::current_exception());
          }
          return true;
        });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::recv(std::vector<at::Tensor>& tensors, int src, int) {
  require_one(tensors, "recv");
  TORCH_CHECK(src != getRank(), "nanodist: recv from this rank itself (", src, ") would wait forever");
  const at::Tensor t = tensors[0];
  return enqueue(OpType::RECV, tensors, [t, src](comm::Communicator& c) {
    at::Tensor moved = movable(t);
    with_element_type(moved.scalar_type(), [&](auto tag) { c.recv(span_of<decltype(tag)>(moved), src); });
    put_back(t, moved);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::recvAnysource(std::vector<at::Tensor>& tensors, int) {
  require_one(tensors, "recv (from any source)");
  const at::Tensor t = tensors[0];
  return enqueue(OpType::RECVANYSOURCE, tensors, [t](comm::Communicator& c, NanodistWork& work) {
    at::Tensor moved = movable(t);
    with_element_type(moved.scalar_type(),
                      [&](auto tag) { work.set_source_rank(c.recv_from_any(span_of<decltype(tag)>(moved))); });
    put_back(t, moved);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::barrier(const c10d::BarrierOptions&) {
  return enqueue(OpType::BARRIER, {}, [](comm::Communicator& c) { c.barrier(); });
}

}  // namespace nanodist_torch
