#!/usr/bin/env python3
"""Every relative link in the repository's Markdown files points at a file that exists.

Checks `[text](target)` links and repository paths written in backticks or plain text that
start with `docs/`, `lab/`, `tools/` or `scenarios/` and end in a file name. Links to the web
(`scheme:`) and to anchors alone (`#...`) are skipped; an anchor after a path is ignored.
Exits 1 and lists each broken target, or 0. Run from anywhere:

    python3 tools/md_links.py [--paths]

`--paths` also checks the plain repository paths (journal and measurement records are
skipped there, as they name files of their day; so are globs and placeholders such as NAME).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w/.-])((?:docs|lab|tools|scenarios)/[\w./-]*\w\.(?:md|py|sh|rs|toml))(?![\w/])")
RECORDS = ("docs/journal/", "docs/measurements/")


def markdown_files():
    out = subprocess.check_output(["git", "ls-files", "*.md"], cwd=ROOT, text=True)
    return [f for f in out.split() if os.path.exists(os.path.join(ROOT, f))]


def main():
    paths = "--paths" in sys.argv[1:]
    broken = []
    for f in markdown_files():
        text = open(os.path.join(ROOT, f), encoding="utf-8").read()
        for n, line in enumerate(text.splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-zA-Z][\w+.-]*:", target) or target.startswith("#"):
                    continue
                path = target.split("#", 1)[0]
                if not os.path.exists(os.path.join(ROOT, os.path.dirname(f), path)):
                    broken.append(f"{f}:{n}: link {target}")
            if paths and not f.startswith(RECORDS):
                for path in PATH.findall(line):
                    # Patterns and placeholders (`scenarios/x.toml`, `NAME-dgx.toml`) name no file.
                    if "*" in path or path.endswith("/x.toml") or re.search(r"\b(NAME|FILE|DIR|PROFILE|SCENARIO|OUTDIR|CRATE)\b", path):
                        continue
                    if not os.path.exists(os.path.join(ROOT, path)):
                        broken.append(f"{f}:{n}: path {path}")
    for b in broken:
        print(b)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
