#include "parallel/pp/tied_embedding.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "comm/runtime.hpp"

namespace parallel {
namespace {

// The other end of the embedding group, or -1 when this stage is not in it.
int partner(comm::Communicator& pp) {
  if (pp.size() == 1) return -1;
  if (pp.rank() == 0) return pp.size() - 1;
  if (pp.rank() == pp.size() - 1) return 0;
  return -1;
}

}  // namespace

void sum_tied_embedding_grads(nn::GPT& model, comm::Communicator& pp) {
  if (partner(pp) >= 0) sum_tied_embedding_grads(model.tied_embedding(), pp);
}

void verify_tied_embedding(nn::GPT& model, comm::Communicator& pp) {
  if (partner(pp) >= 0) verify_tied_embedding(model.tied_embedding(), pp);
}

void sum_tied_embedding_grads(const nn::Tensor& wte, comm::Communicator& pp) {
  const int other = partner(pp);
  if (other < 0) return;
  auto grad = wte.grad_values();
  std::vector<float> theirs(grad.size());
  pp.send_recv(std::span<const float>(grad), other, std::span<float>(theirs), other);
  // a + b on one side, b + a on the other: float addition is commutative, so the sums are equal.
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] += theirs[i];
}

void verify_tied_embedding(const nn::Tensor& wte, comm::Communicator& pp) {
  const int other = partner(pp);
  if (other < 0) return;
  auto mine = wte.values();
  std::vector<float> theirs(mine.size());
  pp.send_recv(std::span<const float>(mine), other, std::span<float>(theirs), other);
  if (!std::equal(mine.begin(), mine.end(), theirs.begin()))
    throw comm::Error(
        fmt::format("check: the copies of the tied embedding (transformer.wte.weight) on stages 0 and "
                    "{} differ",
                    pp.size() - 1));
}

}  // namespace parallel
