"""matplotlib for the plot scripts, from whichever python3 runs them.

`python3` may not be Debian's interpreter (pyenv, a virtualenv, conda): those do not see
Debian's python3-matplotlib. Then the script is run again under /usr/bin/python3, which
does; if that lacks it too, one line says how to install it, and the exit status is 77
(the "skipped" status ctest and automake know: an optional tool is missing, nothing failed).
"""
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"
MISSING = 77  # exit status when matplotlib is missing


def pyplot():
    """Returns matplotlib.pyplot (Agg backend), re-running the script under Debian's python3 if needed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        pass
    here = os.path.realpath(sys.executable)
    if os.path.exists(DEBIAN_PYTHON) and here != os.path.realpath(DEBIAN_PYTHON) and not os.environ.get("NANODIST_REEXEC"):
        os.environ["NANODIST_REEXEC"] = "1"  # once: never loop
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)
    print("error: matplotlib is missing: install it with `bash scripts/install_deps.sh --plots` "
          "(Debian's python3-matplotlib)", file=sys.stderr)
    sys.exit(MISSING)
