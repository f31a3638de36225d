#!/usr/bin/env python3
"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/distributed_test.py,
shipped with python3-torch 1.13) against the nanodist backend, the way PyTorch runs it for a
plug-in backend: every test starts WORLD_SIZE processes (forked), each joins with
init_process_group("nanodist", init_method="file://…"), runs the test and checks its results.

    pytorch_suite.py                      the whole suite (minutes; prints pass/fail/skip)
    pytorch_suite.py -k test_all_reduce   a subset (unittest's -k patterns), as ctest runs
    pytorch_suite.py --min-passes 20 ...  fails unless at least 20 tests pass (and none fails)
    WORLD_SIZE=3 pytorch_suite.py         on 3 ranks (the suite's 3- and 4-rank tests run)

Ends with one line, "pytorch suite on N ranks: R run, P passed, F failed, E errors, S skipped",
then the skip reasons and how many tests each skipped. Exits non-zero when a test fails, when
no test ran, or when fewer than --min-passes passed: a suite that skips itself into a pass
does not pass.

Needs build/python (nanodist_torch) and tests/torch_backend/stubs (expecttest) on PYTHONPATH;
sets BACKEND=nanodist and WORLD_SIZE (default 2) itself."""
import collections
import os
import sys
import unittest

# Our own flag, taken out before PyTorch's test utilities parse the rest.
min_passes = 1
list_passed = "--list-passed" in sys.argv
if list_passed:
    sys.argv.remove("--list-passed")
if "--min-passes" in sys.argv:
    at = sys.argv.index("--min-passes")
    min_passes = int(sys.argv[at + 1])
    del sys.argv[at:at + 2]

here = os.path.dirname(os.path.abspath(__file__))
# Under CI=true PyTorch's runner writes JUnit XML through xmlrunner, which Debian does not
# package: the suite's own report on stdout is the one read here.
os.environ.pop("CI", None)
sys.path.insert(0, os.path.join(here, "stubs"))
os.environ.setdefault("BACKEND", "nanodist")
os.environ.setdefault("WORLD_SIZE", "2")

import torch.multiprocessing  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

import nanodist_torch  # noqa: F401,E402  (registers "nanodist"; forked children inherit it)

# A plug-in backend runs the suite's generic and DDP tests (the features gloo has on a CPU).
DistTestCases.backend_feature["plugin"].add("nanodist")
DistTestCases.backend_feature["ddp"].add("nanodist")
DistTestCases.backend_feature["subgroup"].add("nanodist")

import torch.testing._internal.distributed.distributed_test as suite  # noqa: E402
from torch.testing._internal import common_utils  # noqa: E402

# Its test runner turns on DDP's replicated-tensor mode, whose import (torch.distributed._shard)
# fails on Debian's Python 3.11 with this torch: not a backend matter, so it stays off.
import torch.nn.parallel._replicated_tensor_ddp_utils as replicated  # noqa: E402

replicated._set_ddp_with_replicated_tensor = lambda value: None


# Some tests are guarded by the backend's name, not by what it can do: they run for mpi or gloo
# only. nanodist does what they test (CPU all_to_all and all_to_all_single, batch_isend_irecv
# on CPU, a Work's future), so for these reasons their skip is lifted (the function's skip mark,
# sandcastle_skip_if's, in this process only). Skips for CUDA, NCCL, per-call timeouts and the
# rest stay.
NAME_GUARDS_NANODIST_PASSES = {
    "Only MPI supports CPU all_to_all_single",
    "Only MPI supports all_to_all",
    "GLOO Batch Send Recv CPU",
    "get_future is only supported on mpi, nccl and gloo",
}
# Tests whose code builds its model only for backends it names (a branch per backend, none for
# a plug-in): lifted, they fail on a missing variable, not on a missing capability. They stay skipped.
KEYED_ON_BACKEND_NAME = ("test_accumulate_gradients_no_sync",)
# Tests guarded by require_backend({'gloo'}) or ({'nccl', 'gloo'}) that nanodist passes (the
# rest of that group test gloo's own monitored_barrier, its debug wrapper, or CUDA).
# (NANODIST_SUITE_TRY=name,name lifts others, to try them: --list-passed says which pass.)
REQUIRES_GLOO_NANODIST_PASSES = {
    "test_all_gather_object_default_pg", "test_all_gather_object_subgroup", "test_broadcast_object_list",
    "test_gather_object", "test_gather_object_subgroup", "test_scatter_object_list",
    *(f"test_all_reduce_coalesced_{group}{op}" for group in ("", "group_", "full_group_")
      for op in ("max", "min", "product", "sum")),
} | (set(os.environ.get("NANODIST_SUITE_TRY", "").split(",")) - {""})
for attribute in dir(suite.DistributedTest._DistTestBase):
    test = getattr(suite.DistributedTest._DistTestBase, attribute)
    if not getattr(test, "__unittest_skip__", False) or attribute.startswith(KEYED_ON_BACKEND_NAME):
        continue
    if getattr(test, "__unittest_skip_why__", "") in NAME_GUARDS_NANODIST_PASSES or attribute in REQUIRES_GLOO_NANODIST_PASSES:
        test.__unittest_skip__ = False


class TestNanodistBackend(suite.TestDistBackend, suite.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        # Forked, not spawned (PyTorch's default here): each child starts with torch and this
        # suite imported already instead of importing them again — about 3 s a test on 2 cores.
        # The parent never joins a group itself, so a child inherits no MPI or thread state.
        # (docs/pytorch.md: a rank's exit runs the last meeting; _run below keeps that.)
        self._start_processes(torch.multiprocessing.get_context("fork").Process)

    @classmethod
    def _run(cls, rank, test_name, file_name, parent_pipe):
        # A forked rank leaves by os._exit, past atexit: the backend's exit (the last meeting of
        # all ranks, nanodist_torch._end) runs here instead, as it would at a spawned rank's exit.
        try:
            super()._run(rank, test_name, file_name, parent_pipe)
        finally:
            nanodist_torch._end()


if __name__ == "__main__":
    assert dist.is_available()
    # What common_utils.run_tests does without its CI options, keeping the result to count.
    class Result(unittest.TextTestResult):
        """Keeps the names of the tests that passed (--list-passed prints them)."""
        passed_names = []

        def addSuccess(self, test):
            super().addSuccess(test)
            self.passed_names.append(test.id().rsplit(".", 1)[-1])

    runner = unittest.TextTestRunner(resultclass=Result)
    result = unittest.main(argv=common_utils.UNITTEST_ARGS, testRunner=runner, exit=False).result
    skipped = len(result.skipped)
    failed, errors = len(result.failures), len(result.errors)
    passed = result.testsRun - failed - errors - skipped - len(result.expectedFailures)
    print(f"pytorch suite on {os.environ['WORLD_SIZE']} ranks: {result.testsRun} run, {passed} passed, {failed} failed, "
          f"{errors} errors, {skipped} skipped")
    for reason, count in collections.Counter(reason for _, reason in result.skipped).most_common():
        print(f"  skipped {count:3d}: {reason}")
    if list_passed:
        print("passed: " + " ".join(sorted(Result.passed_names)))
    if result.testsRun == 0 or failed or errors or passed < min_passes:
        print(f"pytorch suite: FAILED (at least {min_passes} must pass, none fail)")
        sys.exit(1)
