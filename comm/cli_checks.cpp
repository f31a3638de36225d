#include "comm/cli_checks.hpp"

#include <algorithm>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace comm::cli {
namespace {

constexpr const char* kMarker = "must be ";

std::string bound(double x) { return fmt::format("{}", x); }  // shortest form: 0.9999, 1e-03

}  // namespace

CLI::Validator whole(std::int64_t min, std::int64_t max) {
  const std::string want = max == std::numeric_limits<int>::max()
                               ? fmt::format("{}a whole number ≥ {}", kMarker, min)
                               : fmt::format("{}a whole number from {} to {}", kMarker, min, max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long value = std::strtoll(text.c_str(), &end, 10);
        const bool number = !text.empty() && end && *end == '\0';
        // Above the largest value (or past what 64 bits hold): the message names that limit,
        // which "≥ min" alone would not.
        if (number && ((errno == ERANGE && value > 0) || value > max))
          return fmt::format("{}a whole number from {} to {}, got {}", kMarker, min, max, text);
        if (!number || errno == ERANGE || value < min) return fmt::format("{}, got {}", want, text);
        return {};
      },
      want.substr(std::string(kMarker).size()));
}

CLI::Validator real(double min, double max, bool above) {
  const std::string at_least = fmt::format("{}a number {} {}", kMarker, above ? ">" : "≥", bound(min));
  const std::string within = fmt::format("{} and ≤ {}", at_least, bound(max));
  const std::string want = max < std::numeric_limits<float>::max() ? within : at_least;
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        const bool number = !text.empty() && end && *end == '\0' && std::isfinite(value);
        // Above the largest value (a float's, by default): the message names that limit.
        if (number && value > max) return fmt::format("{}, got {}", within, text);
        if (!number || value < min || (above && value == min)) return fmt::format("{}, got {}", want, text);
        return {};
      },
      want.substr(std::string(kMarker).size()));
}

CLI::Validator positive_real(double max) { return real(0.0, max, true); }

CLI::Option* add_choice_index(CLI::App& app, const std::string& flag, std::vector<std::string> names,
                              std::function<void(std::size_t)> set, std::size_t current, const std::string& help) {
  const std::string default_name = names.at(current);
  auto parse = [names, set = std::move(set)](const std::string& typed) {
    set(static_cast<std::size_t>(std::find(names.begin(), names.end(), typed) - names.begin()));
  };
  return app.add_option_function<std::string>(flag, parse, help)
      ->check(CLI::IsMember(std::move(names)))
      ->default_str(default_name);
}

std::string readable(const CLI::ParseError& error) {
  std::string text = error.what();
  const std::string joint = std::string(": ") + kMarker;
  if (const auto at = text.find(joint); at != std::string::npos) text.replace(at, 2, " ");
  return text;
}

int parse_or_exit_status(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    fmt::print(stderr, "error: {}\n", readable(e));
    return 2;
  }
  return -1;
}

}  // namespace comm::cli
