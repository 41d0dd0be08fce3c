/* Minimal test helpers: CHECK(cond) records a failure with file:line and keeps
 * going; a test's main ends with `return check_report();` (exit 1 on failure).
 * Exit 77 (via check_skip) tells CTest the test was skipped; it prints why. */
#ifndef STRATA_TESTS_CHECK_H
#define STRATA_TESTS_CHECK_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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
static inline int check_report(void) {
  fprintf(stderr, "%d checks, %d failed\n", check_count_, check_failures_);
  return check_failures_ ? 1 : 0;
}
static inline void check_skip(const char *why) {
  fprintf(stderr, "SKIP: %s\n", why);
  exit(77);
}
#endif
