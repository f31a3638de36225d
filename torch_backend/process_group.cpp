// ProcessGroupNanodist's overrides: each checks its tensors at once and hands a body to the
// queue (call_queue.cpp); the Work it returns is nanodist_work.cpp.s.
#include "torch_backend/process_group.hpp"

#include <ATen/ATen.h>
#include <mpi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>

#include "comm/progress_thread.hpp"
#include "torch_backend/tensor_forms.hpp"

namespace nanodist_torch {
namespace {

using comm::ProgressThread;

using c10d::OpType;

void require_cpu(const at::Tensor& t, const char* call) {
  TORCH_CHECK(t.device().is_cpu(), "nanodist: ", call, " takes CPU tensors, got one on ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided && !t.is_quantized() && !t.is_mkldnn(), "nanodist: ", call,
              " takes dense (strided) tensors, got layout ", t.layout());
}

void require_one(const std::vector<at::Tensor>& tensors, const char* call) {
  TORCH_CHECK(tensors.size() == 1, "nanodist: ", call, " takes one tensor per call, got ", tensors.size());
  require_cpu(tensors[0], call);
}

void require_like(const at::Tensor& t, const at::Tensor& model, const char* call, const char* what) {
  require_cpu(t, call);
  TORCH_CHECK(t.scalar_type() == model.scalar_type() && t.numel() == model.numel(), "nanodist: ", call, ": ", what,
              " must have the input's type and size (", model.scalar_type(), ", ", model.numel(), " elements), got ",
              t.scalar_type(), ", ", t.numel());
}

// t reduced in place over the communicator (in the library's form of it: tensor_forms.hpp).
void allreduce_tensor(comm::Communicator& c, const at::Tensor& t, comm::ReduceOp op) {
  at::Tensor r = reducible(t);
  with_element_type(r.scalar_type(), [&](auto tag) { c.allreduce(span_of<decltype(tag)>(r), op); });
  put_back_reduced(t, r);
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

// The reduce_scatter both forms run: `send` (size() blocks, reducible) reduced, this rank's block into `out`.
void reduce_scatter_into(comm::Communicator& c, const at::Tensor& send, const at::Tensor& out, comm::ReduceOp op) {
  at::Tensor recv = reducible(out);
  with_element_type(recv.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    c.reduce_scatter(std::span<const T>(span_of<T>(send)), span_of<T>(recv), op);
  });
  put_back_reduced(out, recv);
}

}  // namespace

ProcessGroupNanodist::ProcessGroupNanodist(int rank, int size, std::unique_ptr<comm::Communicator> communicator,
                                           int max_tag, bool overlap)
    : c10d::ProcessGroup(rank, size), communicator_(std::move(communicator)), max_tag_(max_tag), overlap_(overlap) {
  name_ = communicator_->name();
}

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

void ProcessGroupNanodist::check_tag(int tag, const char* call) const {
  TORCH_CHECK(tag >= 0 && tag <= max_tag_, "nanodist: ", call, ": tag ", tag, " is outside 0 to ", max_tag_,
              " (MPI's largest tag here)");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  require_one(tensors, "broadcast");
  const at::Tensor t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(OpType::BROADCAST, "broadcast", tensors, [t, root](comm::Communicator& c) {
    at::Tensor moved = movable(t);
    with_element_type(moved.scalar_type(), [&](auto tag) { c.broadcast(span_of<decltype(tag)>(moved), root); });
    put_back(t, moved);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  require_one(tensors, "all_reduce");
  const comm::ReduceOp op = reduction_for(opts.reduceOp, tensors[0].scalar_type(), "all_reduce");
  const at::Tensor t = tensors[0];
  return enqueue(OpType::ALLREDUCE, "all_reduce", tensors,
                 [t, op](comm::Communicator& c) { allreduce_tensor(c, t, op); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                         const c10d::AllreduceCoalescedOptions& opts) {
  std::vector<comm::ReduceOp> ops;
  for (const auto& t : tensors) {
    require_cpu(t, "all_reduce_coalesced");
    ops.push_back(reduction_for(opts.reduceOp, t.scalar_type(), "all_reduce_coalesced"));
  }
  return enqueue(OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, [tensors, ops](comm::Communicator& c) {
    for (std::size_t i = 0; i < tensors.size(); ++i) allreduce_tensor(c, tensors[i], ops[i]);  // (types may differ)
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  require_one(tensors, "reduce");
  const comm::ReduceOp op = reduction_for(opts.reduceOp, tensors[0].scalar_type(), "reduce");
  const at::Tensor t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(OpType::REDUCE, "reduce", tensors, [t, op, root](comm::Communicator& c) {
    at::Tensor r = reducible(t);
    with_element_type(r.scalar_type(), [&](auto tag) { c.reduce(span_of<decltype(tag)>(r), op, root); });
    if (c.rank() == root) put_back_reduced(t, r);
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
  return enqueue(OpType::ALLGATHER, "all_gather", outs, [in, outs](comm::Communicator& c) {
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
  return enqueue(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output}, [in, out](comm::Communicator& c) {
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
  return enqueue(OpType::ALLGATHER_COALESCED, "all_gather_coalesced", flat_outputs, [ins, outs](comm::Communicator& c) {
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
  return enqueue(OpType::GATHER, "gather", outs, [in, outs, root](comm::Communicator& c) {
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
  return enqueue(OpType::SCATTER, "scatter", outputs, [ins, out, root](comm::Communicator& c) {
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
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(getSize()),
              "nanodist: reduce_scatter needs one input list of ", getSize(), " tensors");
  for (const auto& i : inputs[0]) require_like(i, outputs[0], "reduce_scatter", "every input");
  const comm::ReduceOp op = reduction_for(opts.reduceOp, outputs[0].scalar_type(), "reduce_scatter");
  const at::Tensor out = outputs[0];
  const std::vector<at::Tensor> ins = inputs[0];
  return enqueue(OpType::REDUCE_SCATTER, "reduce_scatter", outputs, [ins, out, op](comm::Communicator& c) {
    std::vector<at::Tensor> parts;
    for (const auto& i : ins) parts.push_back(reducible(i));
    reduce_scatter_into(c, at::cat(parts), out, op);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                          const c10d::ReduceScatterOptions& opts) {
  require_cpu(input, "_reduce_scatter_base");
  require_cpu(output, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * getSize(),
              "nanodist: _reduce_scatter_base: the input must hold ", getSize(), " × the output (", output.numel(),
              " elements of ", output.scalar_type(), "), got ", input.numel(), " of ", input.scalar_type());
  const comm::ReduceOp op = reduction_for(opts.reduceOp, input.scalar_type(), "reduce_scatter_tensor");
  const at::Tensor in = input, out = output;
  return enqueue(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output}, [in, out, op](comm::Communicator& c) {
    reduce_scatter_into(c, reducible(in), out, op);
  });
}

namespace {

// Counts in the library's elements of `whole` (a type it lacks moves as bytes): each part's share.
std::vector<std::size_t> counts_of(const std::vector<at::Tensor>& parts, const at::Tensor& whole) {
  std::int64_t elements = 0;
  for (const at::Tensor& p : parts) elements += p.numel();
  std::vector<std::size_t> counts;
  for (const at::Tensor& p : parts)
    counts.push_back(elements == 0 ? 0 : static_cast<std::size_t>(p.numel() * (whole.numel() / elements)));
  return counts;
}

// `in`'s blocks (send_counts, end to end) to the ranks, theirs into `out`'s (recv_counts): both
// movable buffers. `equal`: every rank's blocks are equal by the call's contract (no split sizes
// given) — comm's all-to-all (shm: through its areas when small); otherwise its alltoallv. (Not
// decided from one rank's own counts: another rank with uneven splits would call the other.)
void exchange_blocks(comm::Communicator& c, const at::Tensor& in, const std::vector<std::size_t>& send_counts,
                     const at::Tensor& out, const std::vector<std::size_t>& recv_counts, bool equal) {
  with_element_type(in.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    if (equal)
      c.alltoall(std::span<const T>(span_of<T>(in)), span_of<T>(out));
    else
      c.alltoallv(std::span<const T>(span_of<T>(in)), std::span<const std::size_t>(send_counts), span_of<T>(out),
                  std::span<const std::size_t>(recv_counts));
  });
}

// Each rank sends send_parts[p] to rank p and receives recv_parts[p] from it: the parts laid
// end to end in one buffer each (copies), one exchange, the blocks copied back into the parts.
void exchange_all(comm::Communicator& c, const std::vector<at::Tensor>& send_parts,
                  const std::vector<at::Tensor>& recv_parts) {
  const at::Tensor in = joined(send_parts);
  at::Tensor out = joined(recv_parts);
  const std::vector<std::size_t> recv_counts = counts_of(recv_parts, out);
  exchange_blocks(c, in, counts_of(send_parts, in), out, recv_counts, false);
  std::int64_t start = 0;  // the blocks back into their parts
  for (std::size_t i = 0; i < recv_parts.size(); ++i) {
    const auto length = static_cast<std::int64_t>(recv_counts[i]);
    put_back(recv_parts[i], out.narrow(0, start, length));
    start += length;
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
  // (as PyTorch's own backends: the splits cover the first dimension exactly)
  TORCH_CHECK(start == rows.size(0), "nanodist: all_to_all: the ", what, " split sizes add up to ", start,
              ", not its first dimension (", rows.size(0), ")");
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
  if (input.is_contiguous() && output.is_contiguous() && !input.storage().is_alias_of(output.storage())) {
    // The parts are consecutive stretches of one buffer each: they move in place, without the
    // copy into one buffer and back (16 MB on 2 ranks: 12 ms → 3). (Input and output in one
    // storage, all_to_all_single(t, t): through the copies, as comm refuses overlapping buffers.)
    const at::Tensor in = movable(input), out = movable(output);
    const bool equal = input_split_sizes.empty() && output_split_sizes.empty();
    return enqueue(OpType::ALLTOALL_BASE, "all_to_all_single", {output},
                   [in, out, output, equal, send_counts = counts_of(ins, in), recv_counts = counts_of(outs, out)](
                       comm::Communicator& c) {
                     exchange_blocks(c, in, send_counts, out, recv_counts, equal);
                     put_back(output, out);  // (nothing to do: out is output, or its bytes)
                   });
  }
  return enqueue(OpType::ALLTOALL_BASE, "all_to_all_single", {output},
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
    // One type for all: the parts travel as one buffer (comm's alltoallv).
    TORCH_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                    outputs[i].scalar_type() == inputs[0].scalar_type(),
                "nanodist: all_to_all: every input and output tensor must have one type (", inputs[0].scalar_type(),
                "), tensor ", i, " is ", inputs[i].scalar_type(), " → ", outputs[i].scalar_type());
  }
  const auto me = static_cast<std::size_t>(getRank());
  TORCH_CHECK(inputs[me].numel() == outputs[me].numel(), "nanodist: all_to_all: this rank sends itself ",
              inputs[me].numel(), " elements but expects ", outputs[me].numel());
  const std::vector<at::Tensor> ins = inputs, outs = outputs;
  return enqueue(OpType::ALLTOALL, "all_to_all", outputs, [ins, outs](comm::Communicator& c) { exchange_all(c, ins, outs); });
}

// Sends and receives are posted (MPI's nonblocking calls, on the communicator's tagged lane)
// and the thread goes on to the next call at once; its polls complete them. So a receive
// never holds up what is queued behind it (the isend of a ring exchange, batch_isend_irecv,
// another group's collective), and messages match by source and tag, as in gloo and MPI.
c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  require_one(tensors, "send");
  check_tag(tag, "send");
  TORCH_CHECK(dst >= 0 && dst < getSize(), "nanodist: send: rank ", dst, " is not a rank of this group of ", getSize());
  TORCH_CHECK(dst != getRank(), "nanodist: send to this rank itself (", dst, ") would wait forever");
  const at::Tensor t = tensors[0];
  auto buffer = std::make_shared<at::Tensor>();  // the bytes in flight: kept until the send is done
  return enqueue_message(
      OpType::SEND, "send", tensors,
      [t, dst, tag, buffer](comm::Communicator& c) {
        *buffer = movable(t);
        comm::Work posted;
        with_element_type(buffer->scalar_type(), [&](auto type) {
          using T = decltype(type);
          posted = c.isend(std::span<const T>(span_of<T>(*buffer)), dst, tag);
        });
        return posted;
      },
      [buffer](NanodistWork&, const comm::Work&) { buffer->reset(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  require_one(tensors, "recv");
  check_tag(tag, "recv");
  TORCH_CHECK(src >= 0 && src < getSize(), "nanodist: recv: rank ", src, " is not a rank of this group of ",
              getSize());
  TORCH_CHECK(src != getRank(), "nanodist: recv from this rank itself (", src, ") would wait forever");
  return receive(tensors, src, tag, OpType::RECV, "recv");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  require_one(tensors, "recv (from any source)");
  check_tag(tag, "recv (from any source)");
  return receive(tensors, comm::Communicator::kAnySource, tag, OpType::RECVANYSOURCE, "recv (from any source)");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::receive(std::vector<at::Tensor>& tensors, int source, int tag,
                                                             OpType type, const char* name) {
  const at::Tensor t = tensors[0];
  auto buffer = std::make_shared<at::Tensor>();  // where the message lands: t itself, or a copy
  return enqueue_message(
      type, name, tensors,
      [t, source, tag, buffer](comm::Communicator& c) {
        *buffer = movable(t);
        comm::Work posted;
        with_element_type(buffer->scalar_type(),
                          [&](auto element) { posted = c.irecv(span_of<decltype(element)>(*buffer), source, tag); });
        return posted;
      },
      [t, buffer](NanodistWork& work, const comm::Work& done) {
        put_back(t, *buffer);
        buffer->reset();
        work.set_source_rank(done.source());
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNanodist::barrier(const c10d::BarrierOptions&) {
  return enqueue(OpType::BARRIER, "barrier", {}, [](comm::Communicator& c) { c.barrier(); });
}

}  // namespace nanodist_torch
