#!/usr/bin/env python3
"""Relative links between the project's Markdown files must resolve: each `[text](path)`
or `[text](path#anchor)` that is not a URL names a file that exists, and an anchor names a
heading of that file (GitHub's rule: lower case, punctuation dropped, spaces to dashes)."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def anchors(path):
    found = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        title = re.sub(r"[^\w\- ]", "", title)
        found.add(title.replace(" ", "-"))
    return found


def main():
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    files += sorted((ROOT / "examples").rglob("*.md"))
    broken = []
    for source in files:
        fenced = False
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            if FENCE.match(line):
                fenced = not fenced
            if fenced:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                resolved = (source.parent / path).resolve() if path else source
                where = f"{source.relative_to(ROOT)}:{number}"
                if not resolved.exists():
                    broken.append(f"{where}: `{target}`: no such file")
                elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                    broken.append(f"{where}: `{target}`: no heading `#{anchor}` there")
    for line in broken:
        print(line, file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
