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

// FNV-1a, 64 bits: a fast checksum that catches corrupted bytes in a checkpoint.
uint64_t fnv1a64(std::span<const char> bytes);

std::vector<char> read_whole_file(const std::filesystem::path& path);  // throws nn::Error naming path

}  // namespace nn
