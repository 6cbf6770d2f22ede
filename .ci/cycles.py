#!/usr/bin/env python3
"""Import circles between the modules of src/: exits 1 and names every circle it finds.

A module is a file under src/ (src/card/world.rs is `card::world`, src/card/mod.rs is
`card`). An edge a -> b is any path in a's text (outside comments) that names b: `crate::b`,
`super::x` resolved from a, or `self::x` in a folder module, including grouped imports
such as `crate::card::{world, step::Step}`. Only edges inside one top-level folder
(`card`, `facts`, `store`, `pipeline`, `harness`, `cli`) and between folders are kept;
folders' mod.rs files (which only declare and re-export) are left out of circles inside
their own folder, like the crate root.

Usage: python3 .ci/cycles.py [src]
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "src"


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return ()
    return tuple(rel)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def expand(prefix, body):
    """Paths named by a `use` tree body such as `a::{b, c::d}`."""
    out = []
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    for part in parts:
        part = part.strip()
        if not part:
            continue
        m = re.match(r"^([\w:]*?)(?:::)?\{(.*)\}$", part, re.S)
        if m:
            head = [s for s in m.group(1).split("::") if s]
            out += expand(prefix + head, m.group(2))
        else:
            segs = [s.strip() for s in part.split(" as ")[0].split("::") if s.strip()]
            out.append(prefix + segs)
    return out


def paths_in(text):
    text = strip_comments(text)
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", text, re.S):
        found += expand([], m.group(1))
    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", text):
        found.append(m.group(1).split("::"))
    return found


def resolve(mod, segs, modules):
    if not segs:
        return None
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] == "super":
        # `super` in a file module is its folder; in a folder's mod.rs, the folder's parent.
        base, rest = mod[:-1], segs[1:]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    elif segs[0] == "self":
        base, rest = mod, segs[1:]
    else:
        return None
    target = base
    best = None
    for seg in rest:
        target = target + (seg,)
        if target in modules:
            best = target
        else:
            break
    return best


def main():
    files = {}
    for dirpath, _, names in os.walk(ROOT):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                files[module_of(path)] = (path, name == "mod.rs")
    modules = set(files)
    edges = {m: set() for m in modules}
    for mod, (path, is_dir_mod) in files.items():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        for segs in paths_in(text):
            target = resolve(mod, segs, modules)
            if target and target != mod and target != ():
                edges[mod].add(target)
    # Folder modules (mod.rs) declare their children; leave them out of circles.
    folder = {m for m, (_, d) in files.items() if d}
    graph = {m: {t for t in ts if t not in folder} for m, ts in edges.items() if m not in folder and m}
    # Tarjan's strongly connected components.
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

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
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    if not comps:
        print(f"no import circles among {len(graph)} modules under {ROOT}/")
        return 0
    for comp in comps:
        names = ", ".join("::".join(m) for m in comp)
        print(f"import circle of {len(comp)} modules: {names}")
        for m in comp:
            inside = sorted("::".join(t) for t in graph[m] if t in comp)
            print(f"    {'::'.join(m)} -> {', '.join(inside)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
