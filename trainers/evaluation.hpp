// Measuring the model during and after training: loss estimates, the exact validation loss,
// and text samples. The losses are collective: every rank computes its share, then an
// allreduce averages them, so every rank ends with the same number.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "comm/communicator.hpp"
#include "nn/data.hpp"
#include "nn/gpt.hpp"

namespace trainers {

// Mean loss over `iters` random batches of B windows per rank (drawn from stream `seed`,
// which differs per rank), averaged over ranks: nanoGPT's estimate_loss().
float estimate_loss(nn::GPT& model, std::span<const int32_t> tokens, int B, int iters, uint64_t seed,
                    comm::Communicator& world);

// The exact loss over a whole split: every token predicted once, in consecutive
// non-overlapping windows of block_size (the last partial window is left out), the windows
// shared out among the ranks. Not an estimate: the same number on any rank count.
double full_split_loss(nn::GPT& model, std::span<const int32_t> tokens, comm::Communicator& world);

// Generates `new_tokens` characters after `prompt` (which must use the vocabulary's characters).
std::string sample_text(nn::GPT& model, const nn::CharVocabulary& vocabulary, const std::string& prompt,
                        int new_tokens, float temperature, int top_k, uint64_t seed);

}  // namespace trainers
