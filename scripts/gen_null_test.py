#!/usr/bin/env python3
"""Generate the NULL-argument test of the public C API (issue 34).

Reads every function declared in include/strata/*.h (as scripts/gen_api_doc.py
does) and writes a C program that calls each public function once per pointer
argument with that argument NULL, each call in its own child process with a
10 s alarm:

  - a function returning st_status whose comment does not say the argument
    may be NULL must return an error, with st_last_error() naming the function
    and the argument ("st_dataset_map: out is NULL");
  - a function returning anything else (a getter, a void function) must
    return without a signal; a `const char *` result must be "" (not NULL);
  - an argument the comment lets be NULL ("o may be NULL", "accepts NULL",
    and every `void *user` / `arg` / `ctx` passed through to a callback) is
    called when every other pointer argument gets a usable value (a real
    object, a string, an output buffer: destroy, getters, optional options
    and names), and must return without a signal.

The other arguments get harmless values: real objects for the handles a call
may consume or write to (a dataset, a layer, a model, a strategy), a string for
`const char *`, a do-nothing function for function pointers, 1 for counts, 0 for
enums (st_status: ST_ERR_INVALID), zeroed structs by value, and a zeroed
1 MiB buffer for every other pointer. A function therefore passes only when it
checks its pointer arguments for NULL before using any of them: the rule the
library follows. A function added to a header is covered the day it lands.

  gen_null_test.py --out FILE          write the C test program
  gen_null_test.py --list              print the cases, one a line
  gen_null_test.py --remove-check SRC FUNC --out FILE
                                       a copy of SRC with FUNC's first argument
                                       check removed (the planted removal of
                                       tests/test_null_args_plant.sh)
  --headers DIR                        other headers (tests/test_null_args_plant.sh)
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_api_doc  # noqa: E402

# Handles passed as real objects (a call may destroy or write through them).
REAL = {"st_dataset": "fx_dataset()", "st_layer": "fx_layer()", "st_model": "fx_model()",
        "st_strategy": "fx_strategy()", "FILE": "stderr"}
PASS_THROUGH = {"user", "arg", "ctx"}  # void * handed back to the caller's function


def split_params(text):
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse_decl(name, decl):
    """(return type, [(type, name, kind)]) with kind 'ptr', 'fnptr', 'val', 'va'."""
    i = decl.index(name + "(") if name + "(" in decl else decl.index(name + " (")
    ret = decl[:i].replace("static", "").replace("inline", "").strip()
    j = decl.index("(", i)
    depth, k = 0, j
    while True:
        depth += (decl[k] == "(") - (decl[k] == ")")
        if depth == 0:
            break
        k += 1
    params = []
    for n, p in enumerate(split_params(decl[j + 1:k])):
        if p in ("void", ""):
            continue
        if p == "...":
            params.append(("", "...", "va"))
            continue
        m = re.search(r"\(\s*\*\s*(\w+)\s*\)", p)
        if m:  # a function pointer parameter
            params.append((p.replace(m.group(0), "(*)"), m.group(1), "fnptr"))
            continue
        m = re.match(r"(.*?)(\w+)\s*\[\s*\w*\s*\]$", p)
        if m:  # an array parameter: a pointer
            params.append((m.group(1).strip() + " *", m.group(2), "ptr"))
            continue
        m = re.match(r"(.*?)(\w+)$", p)
        typ, pname = m.group(1).strip(), m.group(2)
        params.append((typ, pname, "ptr" if "*" in typ else "val"))
    return ret, params


def header_types(headers_dir):
    """({fn pointer typedefs}, {enum typedefs}, {struct typedefs with a body})."""
    fnp, enums, structs = set(), set(), set()
    for f in os.listdir(headers_dir):
        if not f.endswith((".h", ".h.in")):
            continue
        src = open(os.path.join(headers_dir, f), encoding="utf-8").read()
        fnp.update(re.findall(r"typedef[^;{]*?\(\s*\*\s*(\w+)\s*\)\s*\(", src))
        enums.update(re.findall(r"typedef enum \w*\s*\{[^}]*\}\s*(\w+);", src, re.S))
        structs.update(re.findall(r"typedef struct (\w+)\s*\{", src))
    return fnp, enums, structs


def nullable(comment, params, ret):
    """Names of the pointer arguments the comment lets be NULL."""
    comment = " ".join((comment or "").split())
    names = {p[1] for p in params}
    ok = set()
    for m in re.finditer(r"((?:`?\w+`?, )*`?\w+`?(?: and `?\w+`?)?) may be NULL(?! only)", comment):
        ok.update(w for w in re.findall(r"\w+", m.group(1)) if w in names)
    ptrs = [p for p in params if p[2] in ("ptr", "fnptr")]
    if re.search(r"\baccepts NULL\b", comment, re.I) and ptrs:
        ok.add(ptrs[0][1])
    for typ, pname, kind in ptrs:
        if pname in PASS_THROUGH and re.fullmatch(r"void\s*\*", typ):
            ok.add(pname)
    return ok


def functions(headers_dir):
    """[(header, name, ret, params, nullable names)] for every public function."""
    out = []
    fnp = header_types(headers_dir)[0]
    names = sorted(f for f in os.listdir(headers_dir) if f.endswith((".h", ".h.in")))
    for h in names:
        for name, decl, comment, _ in gen_api_doc.parse_header(os.path.join(headers_dir, h)):
            if name.startswith("st__"):
                continue  # internal (st__assert_fail aborts by design)
            ret, params = parse_decl(name, decl)
            params = [(t, n, "fnptr" if k == "val" and t.split()[-1] in fnp else k)
                      for t, n, k in params]
            out.append((h, name, ret, params, nullable(comment, params, ret)))
    return out


def null_doc(name, ret, params, ok):
    """The line docs/API.md gives a function about NULL arguments."""
    ptrs = [p[1] for p in params if p[2] in ("ptr", "fnptr")]
    if not ptrs:
        return None
    may = ", ".join("`%s`" % p for p in ptrs if p in ok)
    refused = [p for p in ptrs if p not in ok]
    parts = []
    if may:
        parts.append("%s may be NULL" % may)
    if refused:
        lst = ", ".join("`%s`" % p for p in refused)
        if ret == "st_status":
            parts.append("a NULL %s is ST_ERR_INVALID naming the function and the argument" % lst)
        else:
            parts.append("for a NULL %s it does nothing and returns 0, \"\" or an empty value" % lst)
    return "NULL arguments: " + "; ".join(parts) + "."


def arg_value(typ, pname, kind, fnp, enums, structs):
    base = re.sub(r"\bconst\b|\*", " ", typ).split()
    base = base[-1] if base else typ
    if kind == "fnptr" or base in fnp:
        return "(%s)(void (*)(void))fx_noop" % typ
    if kind == "ptr":
        if typ.count("*") == 1 and base in REAL:
            return REAL[base]
        if base == "char" and typ.count("*") == 1 and "const" in typ:
            return '"strata_null_test"'
        return "(%s)fx_fake" % typ
    if base == "st_status":
        return "ST_ERR_INVALID"
    if base in enums:
        return "(%s)0" % typ
    if base in structs:
        return "(%s){0}" % typ
    if base in ("float", "double"):
        return "1.0"
    if base == "bool":
        return "false"
    return "(%s)1" % typ


SCALARS = {"char", "float", "double", "int", "bool", "size_t", "int64_t", "uint64_t", "uint32_t",
           "int32_t", "uint8_t", "void"}


def harmless(param, fnp, structs):
    """Whether the value arg_value gives this pointer argument is safe to use
    (a call that accepts a NULL beside it goes on and uses it): a real
    object, a string, a do-nothing function, or a place to write results to
    (a non-const pointer to a struct or scalar, or to a pointer). A zeroed
    stand-in for an input struct or an opaque handle is not."""
    typ, _, kind = param
    base = re.sub(r"\bconst\b|\*", " ", typ).split()[-1]
    if kind == "fnptr" or base in fnp:
        return True
    if typ.count("*") == 1 and base in REAL:
        return True
    if typ.count("*") == 1 and base == "char" and "const" in typ:
        return True
    if "const" in typ:
        return False
    return typ.count("*") >= 2 or base in structs or base in SCALARS


PROLOGUE = r'''/* Generated by scripts/gen_null_test.py from the headers in include/strata: do not
 * edit. Every public function, called once per pointer argument with that
 * argument NULL, each call in a child process with a 10 s alarm (issue 34). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "strata/strata.h"
@HEADERS@

static _Alignas(64) unsigned char fx_fake[1 << 20]; /* zeroed stand-in of any pointer */
static long fx_noop(void) { return 0; }

static st_dataset *fx_dataset(void) {
  static float x[8 * 4], y[8];
  st_tensor tx = {ST_F32, 2, {8, 4}, x}, ty = {ST_F32, 1, {8}, y};
  st_dataset *d = NULL;
  if (st_dataset_from_tensor_slices(&tx, &ty, 1.0f, true, &d) != ST_OK) abort();
  if (st_dataset_batch(d, 4, false, &d) != ST_OK) abort();
  return d;
}
static st_layer *fx_layer(void) {
  st_layer *l = NULL;
  if (st_dense(3, ST_ACT_LINEAR, &l) != ST_OK) abort();
  return l;
}
static st_strategy *fx_strategy(void) {
  st_strategy_options o = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  o.threads = 1;
  st_strategy *s = NULL;
  if (st_strategy_create(&o, &s) != ST_OK) abort();
  return s;
}
static st_model *fx_model(void) {
  st_model_options o = st_model_default_options(st_shape1(4));
  st_model *m = NULL;
  if (st_sequential_create(&o, &m) != ST_OK || st_model_add(m, fx_layer()) != ST_OK) abort();
  st_compile_options c = st_compile_default_options();
  c.loss = ST_LOSS_SPARSE_CE_LOGITS;
  if (st_model_compile(m, &c) != ST_OK) abort();
  return m;
}

/* word appears in msg with no identifier character on either side */
static int names(const char *msg, const char *word) {
  size_t n = strlen(word);
  for (const char *p = msg; (p = strstr(p, word)) != NULL; p++) {
    int before = p > msg && (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') ||
                             (p[-1] >= 'A' && p[-1] <= 'Z') || (p[-1] >= '0' && p[-1] <= '9'));
    char c = p[n];
    int after = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!before && !after) return 1;
  }
  return 0;
}
/* a refused NULL: an error status and a message naming fn and arg */
static int refused(st_status s, const char *fn, const char *arg) {
  const char *msg = st_last_error();
  if (s == ST_OK) { fprintf(stderr, "  returned ST_OK\n"); return 1; }
  if (!names(msg, fn) || !names(msg, arg)) {
    fprintf(stderr, "  %s, message \"%s\" does not name %s and %s\n", st_status_string(s), msg,
            fn, arg);
    return 1;
  }
  return 0;
}
/* a string getter given NULL returns "" (never NULL) */
static int empty_string(const char *r) {
  if (!r) { fprintf(stderr, "  returned a NULL string\n"); return 1; }
  if (*r) { fprintf(stderr, "  returned \"%s\", not \"\"\n", r); return 1; }
  return 0;
}
'''

EPILOGUE = r'''
int main(int argc, char **argv) {
  int ncases = (int)(sizeof cases / sizeof cases[0]), failed = 0, ran = 0;
  char dir[] = "/tmp/strata_null_XXXXXX";
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  for (int i = 0; i < ncases; i++) {
    if (argc > 1 && strcmp(argv[1], cases[i].fn) != 0) continue;
    ran++;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
      alarm(10);
      if (chdir(dir) != 0) _exit(3);
      st_log_set_level(ST_LOG_OFF);
      _exit(cases[i].run());
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    const char *what = "";
    char buf[64];
    if (WIFSIGNALED(status)) {
      snprintf(buf, sizeof buf, ": killed by signal %d%s", WTERMSIG(status),
               WTERMSIG(status) == SIGALRM ? " (hung for 10 s)" : "");
      what = buf;
    } else if (WEXITSTATUS(status) != 0) {
      what = ": check failed";
    }
    if (*what) failed++;
    printf("%s %d - %s(%s NULL)%s%s\n", *what ? "not ok" : "ok", i + 1, cases[i].fn,
           cases[i].arg, cases[i].accepted ? " [may be NULL]" : "", what);
  }
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("%d cases, %d failed\n", ran, failed);
  return failed ? 1 : 0;
}
'''


def generate(headers_dir):
    fnp, enums, structs = header_types(headers_dir)
    body, table, listing = [], [], []
    n = 0
    for h, name, ret, params, ok in functions(headers_dir):
        ptrs = [p for p in params if p[2] in ("ptr", "fnptr")]
        for typ, pname, kind in ptrs:
            accepted = pname in ok
            others = [q for q in ptrs if q[1] != pname]
            if accepted and not all(harmless(q, fnp, structs) for q in others):
                listing.append("%s %s skipped (may be NULL; a stand-in input beside it)"
                               % (name, pname))
                continue
            args = []
            for t2, p2, k2 in params:
                if k2 == "va":
                    continue
                args.append("NULL" if p2 == pname else arg_value(t2, p2, k2, fnp, enums, structs))
            call = "%s(%s)" % (name, ", ".join(args))
            n += 1
            fn = "case_%d" % n
            if ret == "st_status" and not accepted:
                check = 'return refused(%s, "%s", "%s");' % (call, name, pname)
            elif re.fullmatch(r"const char\s*\*", ret):
                check = "return empty_string(%s);" % call
            elif ret == "void":
                check = "%s;\n  return 0;" % call
            else:
                check = "(void)%s;\n  return 0;" % call
            body.append("static int %s(void) { /* %s: %s */\n  %s\n}" % (fn, h, pname, check))
            table.append('  {"%s", "%s", %d, %s},' % (name, pname, int(accepted), fn))
            listing.append("%s %s %s" % (name, pname, "may-be-null" if accepted else "refused"))
    hs = sorted(f.removesuffix(".in") for f in os.listdir(headers_dir) if f.endswith((".h", ".h.in")))
    text = PROLOGUE.replace("@HEADERS@", "\n".join('#include "strata/%s"' % h for h in hs)) + "\n" + "\n".join(body) + "\n\n"
    text += ("static const struct { const char *fn, *arg; int accepted; int (*run)(void); } "
             "cases[] = {\n" + "\n".join(table) + "\n};\n" + EPILOGUE)
    return text, listing


def remove_check(src, func, out):
    """Write src with the first argument check of func's body left out."""
    s = open(src, encoding="utf-8").read()
    m = re.search(r"^[a-z][^\n;]*\b%s\([^{]*\{\n" % re.escape(func), s, re.M)
    if not m:
        print("%s: no definition of %s" % (src, func), file=sys.stderr)
        return 1
    body = s[m.end():]
    c = re.search(r"^[^\n]*(ST_REQUIRE\(|st__ds_bad_args\(|is NULL)[^\n]*\n", body, re.M)
    if not c:
        print("%s: %s has no argument check" % (src, func), file=sys.stderr)
        return 1
    print("removed from %s: %s" % (func, c.group(0).strip()), file=sys.stderr)
    s = s[:m.end()] + body[:c.start()] + "  /* planted: argument check removed */\n" + body[c.end():]
    with open(out, "w", encoding="utf-8") as f:
        f.write(s)
    return 0


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--headers", default=os.path.join(root, "include", "strata"))
    ap.add_argument("--out")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--remove-check", nargs=2, metavar=("SRC", "FUNC"))
    a = ap.parse_args()
    if a.remove_check:
        return remove_check(a.remove_check[0], a.remove_check[1], a.out)
    text, listing = generate(a.headers)
    if a.list:
        print("\n".join(listing))
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
