// A plan's bad input (an unknown preset, a field missing from a machine file, a layout that
// does not divide): one line for the user.
#pragma once
#include <stdexcept>

namespace planning {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace planning
