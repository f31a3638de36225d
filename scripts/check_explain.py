#!/usr/bin/env python3
"""Holds docs/thresholds.md and `nanodist plan --explain` to each other: every block on the page
that follows a marker

    <!-- explain: nanodist plan ARGS -->

must be, line for line, what `nanodist plan ARGS` prints from its "explain:" line on.

    python3 scripts/check_explain.py NANODIST PAGE
"""
import re
import shlex
import subprocess
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: check_explain.py NANODIST PAGE", file=sys.stderr)
        return 2
    nanodist, page = sys.argv[1], sys.argv[2]
    text = open(page, encoding="utf-8").read()
    blocks = re.findall(r"<!-- explain: nanodist plan (.*?) -->\s*```text\n(.*?)```", text, re.S)
    if not blocks:
        print(f"check_explain: {page} has no explain block", file=sys.stderr)
        return 1
    problems = 0
    for args, shown in blocks:
        run = subprocess.run([nanodist, "plan", *shlex.split(args)], capture_output=True, text=True)
        out = run.stdout
        at = out.find("explain:")
        printed = out[at:] if at >= 0 else f"(no explain: lines; exit {run.returncode}: {run.stderr.strip()})"
        if printed.strip() != shown.strip():
            problems += 1
            print(f"check_explain: {page}: `nanodist plan {args}` prints\n{printed}\nbut the page shows\n{shown}")
    print(f"check_explain: {len(blocks)} block(s), {problems} differ")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
