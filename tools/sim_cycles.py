#!/usr/bin/env python3
"""The module import graph of twin-sim and its cycles, to measure the layering of issue 35.

Every `crate::a::b` path in sim/src (in `use` lines, `use crate::{a::X, b::{Y, Z}}` groups over
several lines, and paths in code; not in comments or strings) is an edge from the module of the
file that writes it to module `a` (with --depth 2, `a::b` where `a` has submodules). `super::`
and `self::` paths are resolved against the file's own module. A file's module is its path
under sim/src (`engine/run/cores.rs` is `engine::run::cores`; `mod.rs` is its folder's module).
Test code is left out unless --tests: files named `tests.rs`, `*_tests.rs`, `proptests.rs` or
`testkit.rs`, and `#[cfg(test)] mod ... { }` blocks.

Prints each cycle as a strongly connected component of the graph (its modules, its files, and
per edge inside it the first file:line that makes it), then a one-line summary. --check exits 1
when there is a cycle (for CI once the cycles are gone).

    tools/sim_cycles.py [--depth N] [--tests] [--check] [SIM_SRC]    (default: sim/src)
"""
import argparse
import os
import re
import sys

TEST_FILES = re.compile(r"(^|/)(tests|[a-z0-9_]*_tests|proptests|testkit)\.rs$")


def strip(text):
    """The text with comments, string and char literals blanked (newlines kept, for lines)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}'), not a lifetime ('a in <'a>).
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_cfg_test_modules(text):
    """Blank `#[cfg(test)] mod name { ... }` blocks (the text has no comments or strings)."""
    out = text
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out = out[:m.start()] + re.sub(r"[^\n]", " ", out[m.start():j]) + out[j:]
    return out


def module_of(rel):
    """`engine/run/cores.rs` -> ['engine', 'run', 'cores']; `engine/mod.rs` -> ['engine']."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return parts


def expand(path_text):
    """The paths a `use` tree names: `a::{b::C, d}` -> ['a::b::C', 'a::d']."""
    path_text = re.sub(r"\s+", "", path_text)
    m = re.match(r"^(.*?)\{(.*)\}$", path_text)
    if not m:
        return [path_text]
    prefix, inner = m.group(1), m.group(2)
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    items.append(cur)
    return [p for it in items if it for p in expand(prefix + it)]


def references(text, module):
    """(line, absolute module path) of every crate-relative path in `text` (stripped)."""
    refs = []
    # use trees, possibly over several lines.
    for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", text):
        line = text.count("\n", 0, m.start()) + 1
        for p in expand(m.group(1)):
            resolved = resolve(p.split("::"), module)
            if resolved:
                refs.append((line, resolved))
    # paths in code: crate::a::..., super::a::..., self::a::... (use lines included again:
    # harmless, the same edges).
    for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", text):
        line = text.count("\n", 0, m.start()) + 1
        resolved = resolve(m.group(1).split("::"), module)
        if resolved:
            refs.append((line, resolved))
    return refs


def resolve(segments, module):
    """Absolute segments of a `crate::`/`super::`/`self::` path from `module`, or None."""
    head = segments[0]
    if head == "crate":
        rest = segments[1:]
    elif head in ("super", "self"):
        base = list(module)
        i = 0
        while i < len(segments) and segments[i] in ("super", "self"):
            if segments[i] == "super":
                if not base:
                    return None
                base.pop()
            i += 1
        rest = base + segments[i:]
    else:
        return None
    rest = [s for s in rest if s and s != "self"]
    return rest or None


def node(segments, depth, modules):
    """The graph node of a module path: its first `depth` segments that name a module."""
    out = []
    for s in segments[:depth]:
        if tuple(out + [s]) in modules:
            out.append(s)
        else:
            break
    return "::".join(out) if out else None


def sccs(graph):
    """Tarjan's strongly connected components, each sorted, larger first."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted((c for c in out if len(c) > 1), key=lambda c: (-len(c), c))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "sim", "src"))
    ap.add_argument("--depth", type=int, default=1, help="module path segments per node (default 1)")
    ap.add_argument("--tests", action="store_true", help="count test code too")
    ap.add_argument("--check", action="store_true", help="exit 1 when there is a cycle")
    a = ap.parse_args(argv)
    root = os.path.normpath(a.src)
    files = {}
    for d, _, names in os.walk(root):
        for f in names:
            if f.endswith(".rs"):
                rel = os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                if a.tests or not TEST_FILES.search(rel):
                    files[rel] = module_of(rel)
    modules = set()
    for m in files.values():
        for i in range(1, len(m) + 1):
            modules.add(tuple(m[:i]))
    graph, evidence, members = {}, {}, {}
    for rel, module in sorted(files.items()):
        src = node(module, a.depth, modules)
        if src is None:
            continue  # lib.rs: the root declares modules, it is no layer
        members.setdefault(src, []).append(rel)
        with open(os.path.join(root, rel), encoding="utf-8") as fh:
            text = strip(fh.read())
        if not a.tests:
            text = drop_cfg_test_modules(text)
        for line, target in references(text, module):
            dst = node(target, a.depth, modules)
            if dst is None or dst == src:
                continue
            graph.setdefault(src, set()).add(dst)
            evidence.setdefault((src, dst), f"{rel}:{line}")
    for v in members:
        graph.setdefault(v, set())
    cycles = sccs(graph)
    for c in cycles:
        files_in = sum(len(members.get(m, [])) for m in c)
        print(f"cycle of {len(c)} modules, {files_in} files: {' '.join(c)}")
        for s in c:
            for d in sorted(graph[s]):
                if d in c:
                    print(f"  {s} -> {d}  ({evidence[(s, d)]})")
    print(f"{len(cycles)} cycle(s) among {len(graph)} modules (depth {a.depth}, "
          f"{'with' if a.tests else 'without'} tests); modules in cycles: "
          f"{sum(len(c) for c in cycles)}")
    return 1 if a.check and cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
