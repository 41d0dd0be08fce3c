#!/usr/bin/env python3
"""Is every layer kind, strategy and backend wired into every place it must be?

  scripts/check_complete.py [ROOT]        (default: this repository)

The compiler catches a missing table entry (the _COUNT sentinels and
static_asserts); this script catches the places it cannot see. For each

  layer kind  (a st_layer_vtable with .class_name = "X" in src/nn/layer_*.c):
    - its Keras class name in the JSON importer's table (src/io/keras_layers.c),
    - each public constructor of its file (a st_status st_*(..., st_layer **out))
      declared in include/strata/nn.h, listed in docs/API.md, and at least one
      of the kind's constructors called by the gradient check
      (tests/test_gradcheck*.c),
    - the Python class `class X(` in python/strata/keras/layers.py (or one of
      the keras/_*.py modules it imports, e.g. _merge.py),
    - X in the README's "layers" row;
  strategy    (an ST_STRATEGY_* of include/strata/distribute.h and its name
               in kind_names[] under src/distribute/):
    - its enum value used by a C test (tests/test_*.c),
    - its name in the CLI (tools/*.c: --strategy's help and checks),
    - its name in the README's "strategies" row,
    - its TensorFlow class (CamelCase name + "Strategy") in
      python/strata/distribute/ unless PYTHON_ABSENT says why not;
  backend     (a row {"name", get_fn} of backends[] in src/backend/backend.c):
    - compared with the reference in tests/test_kernels.c (k_backends),
    - its name in the README's "backends" row.

Prints one line per missing place (`MISSING: ...`) and exits 1 if any;
tests/test_completeness.sh plants incomplete additions and checks that they
are named.
"""
import os
import re
import sys

# Strategies with no TensorFlow class of that name: reached from Python
# otherwise or not yet (said in the README's Python section).
PYTHON_ABSENT = {"pipeline": "model parallelism has no tf.distribute class"}


def read(root, rel):
    try:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def files(root, folder, pattern):
    d = os.path.join(root, folder)
    if not os.path.isdir(d):
        return []
    return sorted(os.path.join(folder, f) for f in os.listdir(d) if re.fullmatch(pattern, f))


def readme_row(readme, area):
    m = re.search(r"^\| " + re.escape(area) + r" \|(.*)$", readme, re.M)
    return m.group(1) if m else ""


def function_bodies(text):
    """{name: body text} of the top-level functions of a C file (rough: a
    line starting an identifier ... '(' up to the matching close brace)."""
    out = {}
    for m in re.finditer(r"^(?:static\s+)?[A-Za-z_][\w \*]*?\b([A-Za-z_]\w*)\s*\(([^;{]*?)\)\s*\{", text, re.M | re.S):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out[m.group(1)] = (m.group(2), text[m.end():i], m.group(0).startswith("static"))
    return out


def check_layers(root, say):
    keras = read(root, "src/io/keras_layers.c")
    header = read(root, "include/strata/nn.h")
    api = read(root, "docs/API.md")
    grad = "".join(read(root, f) for f in files(root, "tests", r"test_gradcheck\w*\.c"))
    py = read(root, "python/strata/keras/layers.py") + "".join(  # and the modules it imports
        read(root, f) for f in files(root, "python/strata/keras", r"_\w+\.py"))
    row = readme_row(read(root, "README.md"), "layers")
    n = 0
    for rel in files(root, "src/nn", r"layer_\w+\.c"):
        text = read(root, rel)
        vts = dict(re.findall(r"st_layer_vtable\s+(\w+)\s*=\s*\{[^}]*?\.class_name\s*=\s*\"(\w+)\"", text, re.S))
        if not vts:
            continue
        funcs = function_bodies(text)
        ctors = {}
        for name, (params, body, static) in funcs.items():
            if static or not name.startswith("st_") or "st_layer **" not in params:
                continue
            used = {vts[v] for v in vts if re.search(r"\b" + v + r"\b", body)}
            if not used:  # through a static helper of the same file
                for h, (_, hbody, _) in funcs.items():
                    if h != name and re.search(r"\b" + h + r"\s*\(", body):
                        used |= {vts[v] for v in vts if re.search(r"\b" + v + r"\b", hbody)}
            ctors[name] = used or set(vts.values())
        for cls in sorted(vts.values()):
            n += 1
            mine = sorted(c for c, used in ctors.items() if cls in used)
            where = f"layer {cls} ({rel})"
            if not mine:
                say(f"{where}: no public constructor (st_status st_*(..., st_layer **out)) in its file")
            if not re.search(r"\{\s*\"" + cls + r"\"\s*,", keras):
                say(f"{where}: no row {{\"{cls}\", ...}} in the Keras importer's table (src/io/keras_layers.c)")
            for c in mine:
                if not re.search(r"\b" + c + r"\s*\(", header):
                    say(f"{where}: constructor {c} not declared in include/strata/nn.h")
                if not re.search(r"\b" + c + r"\b", api):
                    say(f"{where}: constructor {c} not in docs/API.md (scripts/gen_api_doc.py)")
            if mine and not any(re.search(r"\b" + c + r"\s*\(", grad) for c in mine):
                say(f"{where}: no gradient check in tests/test_gradcheck*.c (none of {', '.join(mine)} is called)")
            if not re.search(r"^class " + cls + r"\(", py, re.M):
                say(f"{where}: no Python class {cls} in python/strata/keras/layers.py "
                    "(or a keras/_*.py module it imports)")
            if not re.search(r"\b" + cls + r"\b", row):
                say(f"{where}: not in the README's 'layers' row")
    return n


def check_strategies(root, say):
    enum_text = read(root, "include/strata/distribute.h")
    m = re.search(r"typedef enum[^{]*\{([^}]*ST_STRATEGY_COUNT[^}]*)\}", enum_text, re.S)
    values = re.findall(r"\b(ST_STRATEGY_\w+)", m.group(1)) if m else []
    values = [v for v in values if v != "ST_STRATEGY_COUNT"]
    names = []
    for rel in files(root, "src/distribute", r"\w+\.c"):
        k = re.search(r"kind_names\[\]\s*=\s*\{([^}]*)\}", read(root, rel), re.S)
        if k:
            names = re.findall(r"\"(\w+)\"", k.group(1))
            break
    if not values or not names:
        say("strategies: the ST_STRATEGY_ enum or kind_names[] was not found")
        return 0
    if len(values) != len(names):
        say(f"strategies: {len(values)} ST_STRATEGY_ values but {len(names)} names in kind_names[]")
    ctests = "".join(read(root, f) for f in files(root, "tests", r"test_\w+\.c"))
    cli = "".join(read(root, f) for f in files(root, "tools", r"\w+\.c"))
    row = readme_row(read(root, "README.md"), "strategies")
    py = "".join(read(root, f) for f in files(root, "python/strata/distribute", r"\w+\.py"))
    for value, name in zip(values, names):
        where = f"strategy {name} ({value})"
        if not re.search(r"\b" + value + r"\b", ctests):
            say(f"{where}: used by no C test (tests/test_*.c)")
        if not re.search(r"\b" + name + r"\b", cli):
            say(f"{where}: not in the CLI (tools/*.c: --strategy help and checks)")
        if not re.search(r"`" + name + r"`", row):
            say(f"{where}: not in the README's 'strategies' row")
        cls = "".join(p.capitalize() for p in name.split("_")) + "Strategy"
        if name not in PYTHON_ABSENT and not re.search(r"^class " + cls + r"\(", py, re.M):
            say(f"{where}: no Python class {cls} in python/strata/distribute/")
    return len(values)


def check_backends(root, say):
    reg = read(root, "src/backend/backend.c")
    m = re.search(r"\}\s*backends\[\]\s*=\s*\{(.*?)\};", reg, re.S)
    rows = re.findall(r"\{\s*\"(\w+)\"\s*,\s*(\w+)\s*\}", m.group(1)) if m else []
    if not rows:
        say("backends: no rows found in backends[] (src/backend/backend.c)")
        return 0
    k = re.search(r"k_backends\[\]\s*=\s*\{([^}]*)\}", read(root, "tests/test_kernels.c"))
    tested = set(re.findall(r"\"(\w+)\"", k.group(1))) if k else set()
    row = readme_row(read(root, "README.md"), "backends")
    for name, _ in rows:
        where = f"backend {name}"
        if name != "reference" and name not in tested:
            say(f"{where}: not compared with the reference in tests/test_kernels.c (k_backends)")
        if not re.search(r"`" + name + r"`", row):
            say(f"{where}: not in the README's 'backends' row")
    return len(rows)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    missing = []
    say = missing.append
    nl = check_layers(root, say)
    ns = check_strategies(root, say)
    nb = check_backends(root, say)
    for line in missing:
        print("MISSING: " + line)
    print(f"checked {nl} layer kinds, {ns} strategies, {nb} backends: "
          f"{len(missing)} missing place{'s' if len(missing) != 1 else ''}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
