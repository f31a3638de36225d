// Catch2's implementation and its default main, compiled once for every test program (each
// used to compile its own copy: about 25 s of the sanitizer build per test program).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
