// Catch2's session for a test program with a main of its own; Catch2's implementation is
// compiled once, in catch_runner.cpp (Catch::Session is only declared there).
#pragma once

// Runs the test cases the command line selects: the number that failed, or -1 when the
// command line is not Catch2's.
int run_catch_session(int argc, char** argv);
