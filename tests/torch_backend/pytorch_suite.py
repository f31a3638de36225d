#!/usr/bin/env python3
"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/distributed_test.py,
shipped with python3-torch 1.13) against the nanodist backend, the way PyTorch runs it for a
plug-in backend: every test spawns WORLD_SIZE processes, each joins with
init_process_group("nanodist", init_method="file://…"), runs the test and checks its results.

    pytorch_suite.py                      the whole suite (minutes; prints pass/fail/skip)
    pytorch_suite.py -k test_all_reduce   a subset (unittest's -k patterns), as ctest runs

Needs build/python (nanodist_torch) and tests/torch_backend/stubs (expecttest) on PYTHONPATH;
sets BACKEND=nanodist and WORLD_SIZE (default 2) itself."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
# Under CI=true PyTorch's runner writes JUnit XML through xmlrunner, which Debian does not
# package: the suite's own report on stdout is the one read here.
os.environ.pop("CI", None)
sys.path.insert(0, os.path.join(here, "stubs"))
os.environ.setdefault("BACKEND", "nanodist")
os.environ.setdefault("WORLD_SIZE", "2")

import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

import nanodist_torch  # noqa: F401,E402  (registers "nanodist"; spawned children import this file again)

# A plug-in backend runs the suite's generic and DDP tests (the features gloo has on a CPU).
DistTestCases.backend_feature["plugin"].add("nanodist")
DistTestCases.backend_feature["ddp"].add("nanodist")
DistTestCases.backend_feature["subgroup"].add("nanodist")

import torch.testing._internal.distributed.distributed_test as suite  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402

# Its test runner turns on DDP's replicated-tensor mode, whose import (torch.distributed._shard)
# fails on Debian's Python 3.11 with this torch: not a backend matter, so it stays off.
import torch.nn.parallel._replicated_tensor_ddp_utils as replicated  # noqa: E402

replicated._set_ddp_with_replicated_tensor = lambda value: None


class TestNanodistBackend(suite.TestDistBackend, suite.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    assert dist.is_available()
    run_tests()
