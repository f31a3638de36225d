// CLI11's classes by name only, for headers that pass a command line around.
//
// Why not include <CLI/CLI.hpp> here: that header defines its validators as global objects,
// so every file that includes it compiles them — about 3.6 s per file at -O3 on these
// machines, and 46 of the build's files included it through the headers. Headers name the
// classes; the .cpp files that build or read a command line include <CLI/CLI.hpp> themselves.
#pragma once

namespace CLI {
class App;
class Option;
class Validator;
class ParseError;
}  // namespace CLI
