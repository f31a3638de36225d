// nn::Error: what every nn function throws for bad input (a shape that does not fit, a
// corrupt file, an impossible config). Programs catch it at the top and print one line.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace nn {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace nn
