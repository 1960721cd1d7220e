#!/usr/bin/env python3
"""The code's shape, checked: no function over 120 lines in crates/*/src
(tests apart), and no circle of files inside a crate (a file that uses,
through `use`, `crate::` or `super::` paths, a file that uses it back).

    python3 scripts/structure.py          # exits 1 and lists what it finds

It reads the sources as text (strings and comments blanked, `#[cfg(test)]`
modules cut, re-exports followed to the file that defines a name).
"""
import glob
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LIMIT = 120


def blank(src):
    """Strings, chars and comments replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i) + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
            continue
        m = re.match(r'b?r(#*)"', src[i:i + 10])
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0))) + len(end)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
            continue
        if c == '"':
            j = i + 1
            while src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
            continue
        if c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x..|[^\\'])'", src[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


def cut_tests(src):
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\(crate\))?\s+)?mod\s+\w+\s*\{", src)
    return src[:m.start()] if m else src


def long_functions():
    found = []
    for p in sorted(glob.glob(os.path.join(ROOT, "crates/*/src/**/*.rs"), recursive=True)):
        lines = cut_tests(blank(open(p).read())).split("\n")
        for i, line in enumerate(lines):
            m = re.match(r"\s*(pub(\([a-z]+\))? )?(const )?(unsafe )?(extern \"C\" )?fn (\w+)", line)
            if not m:
                continue
            depth, started, j = 0, False, i
            while j < len(lines):
                for ch in lines[j]:
                    if ch == "{":
                        depth += 1
                        started = True
                    elif ch == "}":
                        depth -= 1
                if started and depth == 0:
                    break
                if not started and lines[j].rstrip().endswith(";"):
                    break
                j += 1
            if j - i + 1 > LIMIT:
                found.append(f"{os.path.relpath(p, ROOT)}:{i + 1} fn {m.group(6)}: {j - i + 1} lines")
    return found


def expand(prefix, body):
    """The paths of a use tree (`a::{b, c::{d, e}}`)."""
    parts, cur, depth = [], "", 0
    for ch in body.strip():
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for p in (p.strip() for p in parts):
        if not p:
            continue
        m = re.match(r"^([\w:]*?)(::)?\{(.*)\}$", p, re.S)
        if m:
            out += expand(prefix + ([m.group(1)] if m.group(1) else []), m.group(3))
        else:
            out.append("::".join(prefix + [re.sub(r"\s+as\s+\w+$", "", p)]))
    return out


def circles():
    found = []
    for root in sorted(glob.glob(os.path.join(ROOT, "crates/*/src"))):
        files = {}
        for f in glob.glob(root + "/**/*.rs", recursive=True):
            rel = os.path.relpath(f, root)
            parts = rel[:-3].split("/")
            mod = () if rel in ("lib.rs", "main.rs") else tuple(parts[:-1] if parts[-1] == "mod" else parts)
            files[mod] = f
        srcs = {m: cut_tests(blank(open(f).read())) for m, f in files.items()}

        def absolute(m, segs):
            if segs[0] == "crate":
                return segs[1:]
            if segs[0] == "self":
                return list(m) + segs[1:]
            if segs[0] == "super":
                base = list(m)
                while segs and segs[0] == "super":
                    base, segs = base[:-1], segs[1:]
                return base + segs
            return None

        reexp = defaultdict(dict)
        for m, src in srcs.items():
            for um in re.finditer(r"pub(?:\([\w:]+\))?\s+use\s+([^;]+);", src):
                for path in expand([], um.group(1)):
                    segs = [x for x in path.split("::") if x]
                    if not segs:
                        continue
                    full = absolute(m, segs)
                    if full is None and tuple(list(m) + [segs[0]]) in files:
                        full = list(m) + segs
                    if full:
                        reexp[m][full[-1]] = tuple(full)

        def resolve(segs, hops=0):
            for k in range(len(segs), -1, -1):
                mod = tuple(segs[:k])
                if mod in files:
                    rest = segs[k:]
                    if rest and rest[0] in reexp[mod] and hops < 5:
                        target = reexp[mod][rest[0]]
                        if target != tuple(segs[:k + 1]):
                            return resolve(list(target) + rest[1:], hops + 1)
                    return mod
            return None

        edges = defaultdict(set)
        for m, src in srcs.items():
            paths = [p for um in re.finditer(r"\buse\s+([^;]+);", src) for p in expand([], um.group(1))]
            paths += [pm.group(0) for pm in re.finditer(r"\b(crate|super)(::\w+)+", src)]
            for path in paths:
                segs = [x for x in path.split("::") if x]
                full = absolute(m, segs) if segs else None
                if full is None:
                    continue
                t = resolve(full)
                if t is not None and t != m:
                    edges[m].add(t)
        index, low, stack, on, count = {}, {}, [], set(), [0]
        sys.setrecursionlimit(10000)

        def connect(v):
            index[v] = low[v] = count[0]
            count[0] += 1
            stack.append(v)
            on.add(v)
            for w in edges[v]:
                if w not in index:
                    connect(w)
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
                if len(comp) > 1:
                    crate = os.path.basename(os.path.dirname(root))
                    found.append(crate + ": " + ", ".join(sorted("/".join(c) or "lib" for c in comp)))

        for v in list(files):
            if v not in index:
                connect(v)
    return found


if __name__ == "__main__":
    longs, rings = long_functions(), circles()
    for f in longs:
        print("over", LIMIT, "lines:", f)
    for c in rings:
        print("circle of files in", c)
    print(f"{len(longs)} functions over {LIMIT} lines, {len(rings)} circles of files")
    sys.exit(1 if longs or rings else 0)
