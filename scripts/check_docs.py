#!/usr/bin/env python3
"""The docs say only what the tree holds (ctest: docs_links).

    python3 scripts/check_docs.py [ROOT]

Reads README.md, CHANGELOG.md, every .md under docs/, hostfiles/ and examples/, and fails with
one line per problem (file:line: what) when
  - a relative link or image does not resolve to a file (or, with #anchor, to a heading of it),
    or leaves the repository;
  - a path in `backticks` that starts at one of the tree's top folders (comm/…, docs/…) names
    nothing in the tree (`*` globs and `name.*` for "the .hpp and the .cpp" are allowed; not in
    CHANGELOG.md, whose moves name the old paths);
  - a page names an issue number or a path outside the repository (a reader's clone has
    neither)."""
import functools
import glob
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`([^`\n]+)`")
EXTERNAL_LINK = re.compile(r"\[[^\]]*\]\(https?://[^)]*\)")
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
OUTSIDE = re.compile(r"(?:\.\./)+shared\b|(?<![\w.])/(?:work|root|home/\w+|tmp/\w+)/|(?<![\w.])~/\w")
# Folders a path in backticks may start at: the tree's own, never build/ or out/ (made by a run).
TOP = {"comm", "nn", "numeric", "parallel", "planning", "trainers", "benchmarks", "examples", "scripts", "docs",
       "tests", "hostfiles", "launcher", "cmake", "torch_backend", ".ci"}


def pages():
    found = [os.path.join(root, name) for name in ("README.md", "CHANGELOG.md")]
    for folder in ("docs", "hostfiles", "examples"):
        found += glob.glob(os.path.join(root, folder, "**", "*.md"), recursive=True)
    return sorted(p for p in found if os.path.isfile(p))


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*?|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.lru_cache(maxsize=None)  # each page's headings, read once however many links point at it
def anchors(path):
    found, fenced = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and line.startswith("#"):
                base = slug(line.lstrip("#"))
                n = 1
                name = base
                while name in found:  # a repeated heading gets -1, -2, …
                    name, n = f"{base}-{n}", n + 1
                found.add(name)
            for named in re.findall(r"<a (?:name|id)=\"([^\"]+)\"", line):
                found.add(named)
    return found


def names_something(path):
    """A backticked repository path: a file or folder of the tree, a glob, or `stem.*`."""
    path = path.rstrip("/").rstrip(".,:;")
    full = os.path.join(root, path)
    return os.path.exists(full) or bool(glob.glob(full)) or bool(glob.glob(full + ".*"))


def check(page):
    problems, fenced = [], False
    here = os.path.dirname(page)
    with open(page, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for number, line in enumerate(lines, 1):
        where = f"{os.path.relpath(page, root)}:{number}"
        if line.lstrip().startswith("```"):  # fences inside list items are indented
            fenced = not fenced
        # Another project's issue or file, linked to where it lives, is a source, not a path here.
        own = EXTERNAL_LINK.sub("", line)
        for found in ISSUE.finditer(own):
            problems.append(f"{where}: names an issue number ('{found.group(0)}'): say what it was instead")
        for found in OUTSIDE.finditer(line):
            problems.append(f"{where}: names a path outside the repository ('{found.group(0)}')")
        if fenced:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(here, file_part)) if file_part else page
            if not (resolved + os.sep).startswith(root + os.sep) and resolved != root:
                problems.append(f"{where}: link '{target}' leaves the repository")
            elif not os.path.exists(resolved):
                problems.append(f"{where}: link '{target}': no such file")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                problems.append(f"{where}: link '{target}': no heading '#{anchor}' in {os.path.relpath(resolved, root)}")
        for code in CODE.findall(own) if not page.endswith("CHANGELOG.md") else []:
            for token in code.split():
                token = token.strip("'\"(),;")
                first = token.split("/", 1)[0]
                if "/" not in token or first not in TOP or re.search(r"[<>{}$|=]|\.\.\.|…", token):
                    continue
                if not names_something(token):
                    problems.append(f"{where}: `{token}` is not in the tree")
    return problems


def main():
    if not os.path.isfile(os.path.join(root, "README.md")):
        sys.exit(f"error: {root} has no README.md (give the repository's root)")
    read = pages()
    problems = [problem for page in read for problem in check(page)]
    for problem in problems:
        print(problem)
    print(f"check_docs: {len(read)} pages, {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
