/* Minimal test helpers: CHECK(cond) records a failure with file:line and keeps
 * going; CHECK_EQ/NE/LT/LE/GT/GE(a, b) and CHECK_STREQ(a, b) also print both
 * operands' values. A test lists its cases in a check_case table and its main
 * ends with `return check_main(argc, argv, cases, n);`: no argument runs every
 * case, `test_x CASE...` the named ones, `test_x --list` prints the names; the
 * closing line "N checks, N failed" comes from check_report (exit 1 on
 * failure). Exit 77 (via check_skip) tells CTest the test was skipped; it
 * prints why. */
#ifndef STRATA_TESTS_CHECK_H
#define STRATA_TESTS_CHECK_H
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int check_failures_ = 0;
static int check_count_ = 0;
#define CHECK(cond)                                                          \
  do {                                                                       \
    check_count_++;                                                          \
    if (!(cond)) {                                                           \
      check_failures_++;                                                     \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)
#define CHECK_MSG(cond, ...)                                                 \
  do {                                                                       \
    check_count_++;                                                          \
    if (!(cond)) {                                                           \
      check_failures_++;                                                     \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
    }                                                                        \
  } while (0)
#define CHECK_OK(expr)                                                       \
  do {                                                                       \
    st_status s_ = (expr);                                                   \
    CHECK_MSG(s_ == ST_OK, "%s -> %s: %s", #expr, st_status_string(s_),      \
              st_last_error());                                              \
  } while (0)
#define CHECK_NEAR(a, b, tol)                                                \
  CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g (tol %g)",   \
            (double)(a), (double)(b), (double)(tol))
/* max |a-b| / max |a| over n floats (0 when a is all zeros and equal). */
static inline double check_rel_diff(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > num) num = d;
    if (fabs(a[i]) > den) den = fabs(a[i]);
  }
  return num / (den > 0 ? den : 1);
}
/* ---- comparisons printing both operands ----------------------------------
 * Each operand is evaluated once into a check_val_ chosen by its type (C11
 * _Generic): signed and unsigned integers (compared by value, so -1 < 1u),
 * floating (compared as long double; NaN fails all but CHECK_NE) and pointers
 * (addresses; strings: CHECK_STREQ). On failure:
 *   tests/test_x.c:42: CHECK_EQ failed: n == 3: n = 4, 3 = 3 */
typedef struct check_val_ {
  enum { CHECK_I_, CHECK_U_, CHECK_F_, CHECK_P_ } kind;
  long long i;
  unsigned long long u;
  long double f;
  const void *p;
} check_val_;
static inline check_val_ check_val_i_(long long x) { return (check_val_){.kind = CHECK_I_, .i = x}; }
static inline check_val_ check_val_u_(unsigned long long x) {
  return (check_val_){.kind = CHECK_U_, .u = x};
}
static inline check_val_ check_val_f_(long double x) { return (check_val_){.kind = CHECK_F_, .f = x}; }
static inline check_val_ check_val_p_(const volatile void *x) {
  return (check_val_){.kind = CHECK_P_, .p = (const void *)x};
}
#define CHECK_VAL_(x)                                                                \
  _Generic((x), _Bool: check_val_u_, char: check_val_i_, signed char: check_val_i_,  \
           short: check_val_i_, int: check_val_i_, long: check_val_i_,               \
           long long: check_val_i_, unsigned char: check_val_u_,                      \
           unsigned short: check_val_u_, unsigned: check_val_u_,                      \
           unsigned long: check_val_u_, unsigned long long: check_val_u_,             \
           float: check_val_f_, double: check_val_f_, long double: check_val_f_,      \
           default: check_val_p_)(x)

enum { CHECK_LT_ = 1, CHECK_EQ_ = 2, CHECK_GT_ = 4, CHECK_UNORDERED_ = 8 };
/* a vs b as one of the CHECK_*_ bits above. */
static inline int check_order_(check_val_ a, check_val_ b) {
  if (a.kind == CHECK_F_ || b.kind == CHECK_F_) {
    long double x = a.kind == CHECK_F_ ? a.f : a.kind == CHECK_I_ ? (long double)a.i
                    : a.kind == CHECK_U_ ? (long double)a.u : (long double)(uintptr_t)a.p;
    long double y = b.kind == CHECK_F_ ? b.f : b.kind == CHECK_I_ ? (long double)b.i
                    : b.kind == CHECK_U_ ? (long double)b.u : (long double)(uintptr_t)b.p;
    return x < y ? CHECK_LT_ : x > y ? CHECK_GT_ : x == y ? CHECK_EQ_ : CHECK_UNORDERED_;
  }
  if (a.kind == CHECK_I_ && a.i < 0) return b.kind == CHECK_I_ && b.i < a.i ? CHECK_GT_
                                            : b.kind == CHECK_I_ && b.i == a.i ? CHECK_EQ_ : CHECK_LT_;
  if (b.kind == CHECK_I_ && b.i < 0) return CHECK_GT_; /* a is >= 0 here */
  unsigned long long x = a.kind == CHECK_I_ ? (unsigned long long)a.i
                         : a.kind == CHECK_U_ ? a.u : (unsigned long long)(uintptr_t)a.p;
  unsigned long long y = b.kind == CHECK_I_ ? (unsigned long long)b.i
                         : b.kind == CHECK_U_ ? b.u : (unsigned long long)(uintptr_t)b.p;
  return x < y ? CHECK_LT_ : x > y ? CHECK_GT_ : CHECK_EQ_;
}
static inline void check_print_val_(check_val_ v) {
  switch (v.kind) {
    case CHECK_I_: fprintf(stderr, "%lld", v.i); break;
    case CHECK_U_: fprintf(stderr, "%llu", v.u); break;
    case CHECK_F_: fprintf(stderr, "%.9Lg", v.f); break;
    default: fprintf(stderr, "%p", v.p); break;
  }
}
/* Counts the check; on failure prints "FILE:LINE: MACRO failed: A OP B: A = a, B = b". */
static inline void check_rel_(const char *file, int line, const char *macro, const char *op,
                              int pass, const char *ea, const char *eb, check_val_ a,
                              check_val_ b) {
  check_count_++;
  if (check_order_(a, b) & pass) return;
  check_failures_++;
  fprintf(stderr, "%s:%d: %s failed: %s %s %s: %s = ", file, line, macro, ea, op, eb, ea);
  check_print_val_(a);
  fprintf(stderr, ", %s = ", eb);
  check_print_val_(b);
  fputc('\n', stderr);
}
/* ea/eb: the operands' text, stringized by the public macro (before NULL and
 * other macros in them expand). */
#define CHECK_REL_(macro, op, pass, a, b, ea, eb)                                    \
  do {                                                                               \
    check_val_ check_a_ = CHECK_VAL_(a);                                             \
    check_val_ check_b_ = CHECK_VAL_(b);                                             \
    check_rel_(__FILE__, __LINE__, macro, op, pass, ea, eb, check_a_, check_b_);     \
  } while (0)
#define CHECK_EQ(a, b) CHECK_REL_("CHECK_EQ", "==", CHECK_EQ_, a, b, #a, #b)
#define CHECK_NE(a, b) \
  CHECK_REL_("CHECK_NE", "!=", CHECK_LT_ | CHECK_GT_ | CHECK_UNORDERED_, a, b, #a, #b)
#define CHECK_LT(a, b) CHECK_REL_("CHECK_LT", "<", CHECK_LT_, a, b, #a, #b)
#define CHECK_LE(a, b) CHECK_REL_("CHECK_LE", "<=", CHECK_LT_ | CHECK_EQ_, a, b, #a, #b)
#define CHECK_GT(a, b) CHECK_REL_("CHECK_GT", ">", CHECK_GT_, a, b, #a, #b)
#define CHECK_GE(a, b) CHECK_REL_("CHECK_GE", ">=", CHECK_GT_ | CHECK_EQ_, a, b, #a, #b)

/* Strings equal (NULL equals only NULL); prints both, quoted, on failure. */
static inline void check_streq_(const char *file, int line, const char *ea, const char *eb,
                                const char *a, const char *b) {
  check_count_++;
  if (a == b || (a && b && !strcmp(a, b))) return;
  check_failures_++;
  fprintf(stderr, "%s:%d: CHECK_STREQ failed: %s == %s: %s = %s%s%s, %s = %s%s%s\n", file, line,
          ea, eb, ea, a ? "\"" : "", a ? a : "NULL", a ? "\"" : "", eb, b ? "\"" : "",
          b ? b : "NULL", b ? "\"" : "");
}
#define CHECK_STREQ(a, b) check_streq_(__FILE__, __LINE__, #a, #b, (a), (b))

static inline int check_report(void) {
  fprintf(stderr, "%d checks, %d failed\n", check_count_, check_failures_);
  return check_failures_ ? 1 : 0;
}
static inline void check_skip(const char *why) {
  fprintf(stderr, "SKIP: %s\n", why);
  exit(77);
}

/* ---- cases by name ---------------------------------------------------------
 *   static const check_case cases[] = {CHECK_CASE(test_a), CHECK_CASE(test_b)};
 *   int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
 * A case taking arguments gets a small void(void) wrapper. */
typedef struct check_case {
  const char *name;
  void (*fn)(void);
} check_case;
#define CHECK_CASE(fn) {#fn, fn}
#define CHECK_MAIN(argc, argv, cases) \
  check_main(argc, argv, cases, (int)(sizeof(cases) / sizeof *(cases)))

static inline const check_case *check_find_(const check_case *cases, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(cases[i].name, name)) return &cases[i];
  return NULL;
}
/* No argument: every case in order; CASE...: those (all names checked first;
 * an unknown one prints the valid names and returns 2); --list: the names on
 * stdout. Returns the exit code (check_report's after running cases). */
static inline int check_main(int argc, char **argv, const check_case *cases, int n) {
  if (argc == 2 && !strcmp(argv[1], "--list")) {
    for (int i = 0; i < n; i++) printf("%s\n", cases[i].name);
    return 0;
  }
  for (int a = 1; a < argc; a++)
    if (!check_find_(cases, n, argv[a])) {
      fprintf(stderr, "%s: unknown case '%s'; the cases are:", argv[0], argv[a]);
      for (int i = 0; i < n; i++) fprintf(stderr, " %s", cases[i].name);
      fputc('\n', stderr);
      return 2;
    }
  if (argc < 2)
    for (int i = 0; i < n; i++) cases[i].fn();
  for (int a = 1; a < argc; a++) check_find_(cases, n, argv[a])->fn();
  return check_report();
}
#endif
