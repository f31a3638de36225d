// How ZeRO cuts the model into shards (parallel/dp/zero_optimizer.hpp uses it).
//
// Each parameter group — the embeddings, each block, ln_f (nn::GPT::parameter_groups) — is
// flattened: its tensors back to back in state_dict order. The flat range is padded to a
// multiple of the N ranks and cut into N equal contiguous shards; rank r owns shard r of
// every group. A tensor may straddle two ranks; the padding (< N elements) belongs to no
// tensor and stays zero.
//
//   block 3, N = 2:  [ ln_1 | c_attn ........ | c_proj ... | ln_2 | c_fc ....... | mlp.c_proj ....... |pad]
//                    [ rank 0's shard ......................... | rank 1's shard ......................... ]
//
// Sharding per group (as PyTorch FSDP does per wrapped module) rather than over the whole
// model is what lets stage 3 gather one block at a time: every rank holds 1/N of each block,
// so a block is one all-gather of equal blocks, and its gradients one reduce-scatter.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "nn/gpt.hpp"

namespace parallel {

class ZeroShards {
 public:
  // A tensor's place in its group's flat range.
  struct Piece {
    int parameter;  // index into model.parameters()
    int64_t begin;  // first element in the group's flat range
    int64_t numel;
  };
  struct Group {
    std::vector<Piece> pieces;
    int64_t size = 0;   // real elements
    int64_t shard = 0;  // elements per rank: ⌈size / N⌉ (the last shard ends in padding)
  };

  ZeroShards(const std::vector<std::vector<int>>& groups, const std::vector<nn::NamedTensor>& parameters, int ranks,
             int rank);

  const std::vector<Group>& groups() const { return groups_; }
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  int64_t padded(int g) const { return groups_[static_cast<std::size_t>(g)].shard * ranks_; }
  int64_t shard_begin(int g) const { return groups_[static_cast<std::size_t>(g)].shard * rank_; }

  // Calls visit(piece, offset in the tensor, offset in the flat range, count) for every
  // stretch of a tensor inside [from, to) of group g's flat range.
  using Visit = std::function<void(const Piece&, int64_t in_tensor, int64_t in_flat, int64_t count)>;
  void for_each_overlap(int g, int64_t from, int64_t to, const Visit& visit) const;

 private:
  std::vector<Group> groups_;
  int ranks_, rank_;
};

}  // namespace parallel
