#!/usr/bin/env python3
"""The shape of the source tree, as DESIGN.md section 4 (convention 8) and
section 1 (no circles) ask for it.

  scripts/code_stats.py [--root DIR] [--build DIR] [--top N] [--check]

Prints the longest files and functions of src/ and the circles of files
(files that call each other in a loop, through non-static symbols) in each
folder of src/ that has its own layer role (distribute/, ps/). The call graph
comes from `nm` on the objects of the build (DIR, default build/): a file
calls another when one of its undefined symbols is defined there.

--check: exit 1 when a file of src/ is over 800 lines, a function of src/ is
over 80 lines, or a circle exists in src/distribute or src/ps (the limits of
issue 27; tests/test_structure.sh runs this).
"""
import argparse
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 800
MAX_FUNC_LINES = 80
CIRCLE_FOLDERS = ("src/distribute", "src/ps")


def source_files(root, top="src"):
    out = []
    for d, _, files in os.walk(os.path.join(root, top)):
        for f in files:
            if f.endswith((".c", ".h", ".cu", ".inc")):
                out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def strip_comments_strings(text):
    """Blank out comments, string and char literals, keeping line breaks."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    pat = r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
    return re.sub(pat, blank, text, flags=re.S)


def function_head(text, brace):
    """The name of the function whose body opens at text[brace] and where its
    name starts, or (None, 0): the text before the brace must be
    NAME ( ... ) [qualifiers]."""
    j = brace - 1
    while j >= 0 and (text[j].isspace() or text[j].isalnum() or text[j] == "_"):
        j -= 1  # trailing qualifiers (e.g. an attribute-free `const`)
    if j < 0 or text[j] != ")":
        return None, 0
    depth = 0
    while j >= 0:
        if text[j] == ")":
            depth += 1
        elif text[j] == "(":
            depth -= 1
            if depth == 0:
                break
        elif text[j] in ";{}":
            return None, 0
        j -= 1
    j -= 1
    while j >= 0 and text[j].isspace():
        j -= 1
    end = j + 1
    while j >= 0 and (text[j].isalnum() or text[j] == "_"):
        j -= 1
    name = text[j + 1:end]
    if not name or not (name[0].isalpha() or name[0] == "_") or name in (
            "if", "for", "while", "switch", "sizeof", "return"):
        return None, 0
    return name, j + 1


def functions(path):
    """(name, first line, line count) of each function body in a C file:
    a top-level '{' whose preceding text ends with ')' (after qualifiers)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_comments_strings(f.read())
    res = []
    depth = 0
    start = None
    name = None
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "{":
            if depth == 0:
                name, sig_at = function_head(text, i)
                if name:
                    start = text.count("\n", 0, sig_at) + 1
                else:
                    name = None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and name:
                end = text.count("\n", 0, i) + 1
                res.append((name, start, end - start + 1))
                name = None
        i += 1
    return res


def object_symbols(build, root):
    """{source rel path: (defined globals, undefined)} from the build's
    objects (those of sources that still exist: a build tree keeps the
    objects of removed files)."""
    out = {}
    for d, _, files in os.walk(build):
        for f in files:
            if not f.endswith((".c.o", ".cu.o")):
                continue
            p = os.path.join(d, f)
            m = re.search(r"\.dir/(.*)\.o$", p)
            if not m or not m.group(1).startswith("src/"):
                continue
            src = m.group(1)
            if src in out or not os.path.exists(os.path.join(root, src)):
                continue
            try:
                nm = subprocess.run(["nm", p], capture_output=True, text=True, check=True).stdout
            except (OSError, subprocess.CalledProcessError):
                continue
            defs, undefs = set(), set()
            for line in nm.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] in "TDBR":
                    defs.add(parts[2])
                elif len(parts) == 2 and parts[0] == "U":
                    undefs.add(parts[1])
            out[src] = (defs, undefs)
    return out


def circles(syms, folder):
    """Strongly connected groups (more than one file) of the file call graph
    restricted to folder."""
    files = [f for f in syms if f.startswith(folder + "/")]
    owner = {}
    for f in files:
        for s in syms[f][0]:
            owner[s] = f
    edges = {f: sorted({owner[s] for s in syms[f][1] if s in owner and owner[s] != f}) for f in files}
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for f in sorted(files):
        if f not in index:
            visit(f)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--build", default=None)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    build = a.build or os.path.join(root, "build")
    bad = 0

    sizes = []
    funcs = []
    for f in source_files(root):
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            sizes.append((sum(1 for _ in fh), f))
        if f.endswith((".c", ".cu", ".inc")):
            for name, line, count in functions(os.path.join(root, f)):
                funcs.append((count, f"{f}:{line}", name))
    sizes.sort(reverse=True)
    funcs.sort(reverse=True)
    print(f"files of src/: {len(sizes)}, lines: {sum(s for s, _ in sizes)}")
    print(f"longest files (limit {MAX_FILE_LINES}):")
    for s, f in sizes[:a.top]:
        print(f"  {s:6d}  {f}")
    print(f"longest functions (limit {MAX_FUNC_LINES}):")
    for c, where, name in funcs[:a.top]:
        print(f"  {c:6d}  {name}  {where}")
    over_f = [x for x in sizes if x[0] > MAX_FILE_LINES]
    over_fn = [x for x in funcs if x[0] > MAX_FUNC_LINES]
    print(f"files over {MAX_FILE_LINES}: {len(over_f)}; functions over {MAX_FUNC_LINES}: {len(over_fn)}")
    if a.check:
        for s, f in over_f:
            print(f"OVER: file {f} has {s} lines (limit {MAX_FILE_LINES})")
            bad = 1
        for c, where, name in over_fn:
            print(f"OVER: function {name} at {where} has {c} lines (limit {MAX_FUNC_LINES})")
            bad = 1

    if os.path.isdir(build):
        syms = object_symbols(build, root)
        for folder in CIRCLE_FOLDERS:
            if not os.path.isdir(os.path.join(root, folder)):
                continue
            cs = circles(syms, folder)
            print(f"circles of files in {folder}: {len(cs)}")
            for c in cs:
                print("  CIRCLE: " + " <-> ".join(c))
                if a.check:
                    bad = 1
    else:
        print(f"no build at {build}: circles not checked")
        if a.check:
            bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
