#!/usr/bin/env bash
# The communication thread under ThreadSanitizer: the library's collectives, blocking and
# asynchronous, caller and thread progress, tagged point-to-point (test_collectives on 2 to 5
# ranks) and the PyTorch backend's (its collectives, issue 46's programs beside gloo, a rank
# that raises). The tsan preset builds only what they need, in build-tsan/;
# any report outside Open MPI, PMIx and libevent (tests/sanitizers/tsan.supp) fails a test.
# Not part of CI's run (its budget); docs/pytorch.md, "ThreadSanitizer", has the last result.
exec bash "$(dirname "$0")/run_sanitizer_tests.sh" --preset tsan "$@"
