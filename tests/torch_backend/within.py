#!/usr/bin/env python3
"""Runs a command and says whether every process of it was gone within SECONDS of the moment
the program reported its failure (a line "failing at <time.time()>"), or of its start.

    within.py SECONDS command...   prints the command's output, then "ended N.N s after the failure"
                                   or "still running N s after the failure" (and kills it)"""
import re
import subprocess
import sys
import time

limit = float(sys.argv[1])
start = time.time()
process = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
failing_at = None
output = []
for line in process.stdout:  # ends when every process holding the pipe is gone
    sys.stdout.write(line)
    output.append(line)
    found = re.match(r".*failing at ([0-9.]+)", line)
    if found:
        failing_at = float(found.group(1))
status = process.wait()
ended = time.time() - (failing_at or start)
print(f"exit status {status}; every process ended {ended:.1f} s after the "
      f"{'failure' if failing_at else 'start'} ({'within' if ended <= limit else 'NOT within'} {limit:.0f} s)")
