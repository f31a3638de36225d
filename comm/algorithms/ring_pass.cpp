#include "comm/algorithms/ring_pass.hpp"

#include "comm/algorithms/algorithms.hpp"
#include "comm/error.hpp"
#include "comm/reduce_kernels.hpp"

namespace comm::algorithms {

RingPass::RingPass(const Transport& t, void* data, BlockLayout layout, DataType type, Mode mode, ReduceOp op)
    : t_(t), data_(data), layout_(layout), type_(type), mode_(mode), op_(op) {
    if (mode_ == Mode::reduce) scratch_.resize(layout_.size(layout_.blocks - 1) * size_of(type_) + 1);
}

int RingPass::block_sent_at(int step) const {
    const int n = t_.size();
    const int shift = mode_ == Mode::reduce ? 1 : 0;
    return ((t_.rank() - step - shift) % n + 2 * n) % n;
}

void RingPass::post_step() {
    const int n = t_.size();
    const int right = (t_.rank() + 1) % n;
    const int left = (t_.rank() + n - 1) % n;
    const int out = block_sent_at(step_);
    const int in = (out + n - 1) % n;
    void* in_buffer = mode_ == Mode::reduce ? scratch_.data() : at(data_, layout_.begin(in), type_);
    requests_.push_back(t_.irecv(in_buffer, layout_.size(in), type_, left));
    requests_.push_back(t_.isend(at(data_, layout_.begin(out), type_), layout_.size(out), type_, right));
}

bool RingPass::progress() {
    const int steps = t_.size() - 1;
    while (step_ < steps) {
        if (requests_.empty()) post_step();
        int done = 0;
        check_mpi(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE),
                  "MPI_Testall");
        if (!done) return false;
        requests_.clear();
        if (mode_ == Mode::reduce) {
            const int in = (block_sent_at(step_) + t_.size() - 1) % t_.size();
            reduce_into(at(data_, layout_.begin(in), type_), scratch_.data(), layout_.size(in), type_, op_);
        }
        ++step_;
    }
    return true;
}

}  // namespace comm::algorithms
