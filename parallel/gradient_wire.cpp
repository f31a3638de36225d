#include "parallel/gradient_wire.hpp"

#include <algorithm>

namespace parallel {

comm::DataType gradient_wire(std::string_view name) {
  return name == "bf16" ? comm::DataType::bf16 : comm::DataType::f32;
}

void to_bf16(std::span<const float> from, std::span<comm::bfloat16> to) {
  std::transform(from.begin(), from.end(), to.begin(), [](float x) { return comm::bfloat16(x); });
}

void from_bf16(std::span<const comm::bfloat16> from, std::span<float> to) {
  std::transform(from.begin(), from.end(), to.begin(), [](comm::bfloat16 x) { return static_cast<float>(x); });
}

}  // namespace parallel
