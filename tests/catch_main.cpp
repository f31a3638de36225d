// The default main of a test program: Catch2's session, whose implementation is compiled once
// in catch_runner.cpp (each test program used to compile its own copy: about 25 s of the
// sanitizer build per program).
#include "catch_session.hpp"

int main(int argc, char** argv) {
  const int failed = run_catch_session(argc, argv);
  return failed < 0 ? 1 : (failed > 255 ? 255 : failed);
}
