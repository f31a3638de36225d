// Ring attention (Liu et al. 2023; Megatron core's context parallelism): attention under
// context parallelism without ever holding a whole sequence. Each of the c ranks keeps its
// queries; the keys and values go round the cp ring, one rank's block per step, and each
// block's partial attention is merged into the running result by the log-sum-exp rule (the
// online softmax of FlashAttention):
//
//   step 0: Q_r · (K_r, V_r)      send (K,V)_r → r+1, receive (K,V)_{r−1}
//   step 1: Q_r · (K_{r−1}, V_{r−1})   …
//   step c−1: Q_r · (K_{r+1}, V_{r+1})           every block seen once
//
//   per query row t and block j: m' = max(m, max_j s_tj)      (s = q·k/√hs, −∞ where masked)
//                                l' = l·e^(m−m') + Σ_j e^(s_tj − m')
//                                o' = o·e^(m−m') + Σ_j e^(s_tj − m')·drop_tj·v_j
//   at the end: y_t = o/l, and lse_t = m + log l kept for backward
//
// Backward goes round again: each block's P = e^(s − lse) is recomputed from the kept lse
// (nothing of size T² is kept), dQ accumulates here, and dK, dV accumulate in a buffer that
// travels with the block and arrives home after c hops. The causal mask is by global position
// (the load-balanced shard, context_shard.hpp): a key chunk later than a query chunk is skipped
// whole, the diagonal chunk is masked inside. Dropout draws the mask of each weight at its place
// (h, query position, key position) in the whole [H,T,T]: every layout drops the same weights.
// The sums run in another order than one rank's softmax: equal within rounding, not bit for bit.
//
// Per layer and rank: c−1 transfers of K and V ([B,S,2C]) forward, c−1 again backward and c of
// dK, dV; with `overlap` the next block's K and V are started (Communicator::send_recv_async)
// before the current block is computed, and move while it computes: on the communication
// thread under --progress thread, else as the transport progresses on its own (the dK, dV hop
// waits for the block's compute: it is not overlapped).
#pragma once
#include "comm/communicator.hpp"
#include "nn/gemm.hpp"  // Precision
#include "nn/dropout_mask.hpp"
#include "nn/tensor.hpp"
#include "parallel/cp/context_shard.hpp"

namespace parallel {

// qkv [B, S, 3C] of n_head heads (q | k | v), this rank's positions → y [B, S, C]. `dropout`:
// the mask of these heads' weights as whole attention would use it. This file's own kernel
// (train_3d refuses it with --attention naive); its products on fp32 inputs, or with
// `precision` bf16 on bf16 inputs with fp32 sums (the online softmax's m, l and lse in fp32).
nn::Tensor ring_attention(const nn::Tensor& qkv, int n_head, const nn::DropoutMask& dropout, const ContextShard& shard,
                          comm::Communicator& cp, bool overlap = true, nn::Precision precision = nn::Precision::fp32);

}  // namespace parallel
