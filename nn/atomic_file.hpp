// Writing a file so that a crash never leaves a half-written one under the real name:
// write "<path>.tmp", flush it to disk, then rename over <path> (rename is atomic).
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace nn {

void write_file_atomically(const std::filesystem::path& path, const std::vector<std::span<const char>>& pieces);
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

// FNV-1a, 64 bits: a short checksum of small things (a text's name for its prepared folder,
// replicas compared), and of checkpoints written before XXH3.
uint64_t fnv1a64(std::span<const char> bytes);

// XXH3, 64 bits (libxxhash): the checksum of a checkpoint's files — about 20× faster than FNV-1a,
// so a checkpoint written in the background costs training little. Over the pieces of one
// file, in order (what write_file_atomically writes).
uint64_t xxh3_64(const std::vector<std::span<const char>>& pieces);

std::vector<char> read_whole_file(const std::filesystem::path& path);  // throws nn::Error naming path

}  // namespace nn
