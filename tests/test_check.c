/* The test helpers of check.h checked: CHECK_EQ/NE/LT/LE/GT/GE and
 * CHECK_STREQ pass when they should, fail when they should (the failure is
 * counted and the printed line holds both expressions and both values), each
 * operand is evaluated once, and check_main runs every case, the named ones,
 * lists them, or refuses an unknown name with exit 2. A failing check runs
 * with stderr and stdout captured in a temp file and the counters restored
 * afterwards, so only this file's own checks decide its exit code. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char out[8192]; /* what the last captured call printed */

/* Runs fn with stdout and stderr in a temp file (kept in out); returns the
 * failures fn's checks counted, then restores both counters. */
static int capture(void (*fn)(void)) {
  fflush(stdout);
  fflush(stderr);
  FILE *tmp = tmpfile();
  if (!tmp) return -1;
  int saved_err = dup(2), saved_out = dup(1);
  dup2(fileno(tmp), 2);
  dup2(fileno(tmp), 1);
  int failures = check_failures_, count = check_count_;
  fn();
  fflush(stdout);
  fflush(stderr);
  dup2(saved_err, 2);
  dup2(saved_out, 1);
  close(saved_err);
  close(saved_out);
  int got = check_failures_ - failures;
  check_failures_ = failures;
  check_count_ = count;
  rewind(tmp);
  size_t n = fread(out, 1, sizeof out - 1, tmp);
  out[n] = '\0';
  fclose(tmp);
  return got;
}

static void passing(void) {
  int n = 3;
  size_t z = 3;
  long long big = -5;
  double x = 0.5;
  const char *s = "abc", *null = NULL;
  CHECK_EQ(n, 3);
  CHECK_EQ(z, 3);
  CHECK_EQ(n, z);
  CHECK_NE(n, 4);
  CHECK_LT(big, 1u);       /* by value: -5 < 1u */
  CHECK_LE(n, 3);
  CHECK_GT(x, 0);
  CHECK_GE(x, 0.5f);
  CHECK_EQ(s, s);
  CHECK_NE(s, NULL);
  CHECK_EQ(null, NULL);
  CHECK_NE(0.0 / 0.0, 0.0 / 0.0); /* NaN */
  CHECK_STREQ(s, "abc");
  CHECK_STREQ(null, NULL);
  const int k = 3;
  enum { SEVEN = 7 } e = SEVEN;
  bool yes = true;
  char buf[4] = "ab", c = 'a';
  int64_t i64 = -1;
  uint64_t u64 = UINT64_MAX;
  float f = 1.0f / 3;
  CHECK_EQ(k, n);
  CHECK_EQ(e, SEVEN);
  CHECK_EQ(yes, true);
  CHECK_EQ(c, 'a');
  CHECK_STREQ(buf, "ab");
  CHECK_NE(buf, NULL);
  CHECK_LT(i64, u64);
  CHECK_GT(u64, i64);
  CHECK_EQ(u64, UINT64_MAX);
  CHECK_EQ(f, 1.0f / 3);
  CHECK(n == 3);
}

static void fail_eq_int(void) {
  int n = 4;
  CHECK_EQ(n, 3);
}
static void fail_lt_unsigned(void) {
  size_t len = 10;
  CHECK_LT(len, -1); /* by value, not as C converts -1 to SIZE_MAX */
}
static void fail_ge_float(void) {
  double loss = 0.25;
  CHECK_GE(loss, 1.5);
}
static void fail_nan(void) {
  double nan = 0.0 / 0.0;
  CHECK_EQ(nan, nan);
  CHECK_LE(nan, 1.0);
}
static void fail_ptr(void) {
  int a = 0;
  int *p = &a;
  CHECK_EQ(p, NULL);
}
static void fail_streq(void) {
  const char *name = "dense", *none = NULL;
  CHECK_STREQ(name, "conv2d");
  CHECK_STREQ(none, "x");
}
static void fail_plain(void) { CHECK(1 + 1 == 3); }

static void test_pass(void) {
  CHECK_EQ(capture(passing), 0);
  CHECK_STREQ(out, "");
}

static void test_fail(void) {
  CHECK_EQ(capture(fail_eq_int), 1);
  CHECK(strstr(out, "test_check.c:") != NULL);
  CHECK(strstr(out, ": CHECK_EQ failed: n == 3: n = 4, 3 = 3\n") != NULL);
  CHECK_EQ(capture(fail_lt_unsigned), 1);
  CHECK(strstr(out, "CHECK_LT failed: len < -1: len = 10, -1 = -1") != NULL);
  CHECK_EQ(capture(fail_ge_float), 1);
  CHECK(strstr(out, "CHECK_GE failed: loss >= 1.5: loss = 0.25, 1.5 = 1.5") != NULL);
  CHECK_EQ(capture(fail_nan), 2);
  CHECK(strstr(out, "CHECK_LE failed: nan <= 1.0: nan = ") != NULL);
  CHECK_EQ(capture(fail_ptr), 1);
  CHECK(strstr(out, "CHECK_EQ failed: p == NULL: p = 0x") != NULL);
  CHECK_EQ(capture(fail_streq), 2);
  CHECK(strstr(out, "CHECK_STREQ failed: name == \"conv2d\": name = \"dense\", \"conv2d\" = \"conv2d\"") != NULL);
  CHECK(strstr(out, "none = NULL, \"x\" = \"x\"") != NULL);
  CHECK_EQ(capture(fail_plain), 1);
  CHECK(strstr(out, "CHECK failed: 1 + 1 == 3") != NULL);
}

static int calls_a, calls_b;
static void once_each(void) {
  int i = 0, j = 5;
  CHECK_EQ(i++, 0);
  CHECK_LT(i++, j--);
  CHECK_STREQ((calls_a++, "x"), (calls_b++, "x"));
  calls_a += i == 2 && j == 4 ? 10 : 100;
}
static void test_once(void) {
  CHECK_EQ(capture(once_each), 0);
  CHECK_EQ(calls_a, 11);
  CHECK_EQ(calls_b, 1);
}

/* check_main over a table of two fake cases. */
static int ran_a, ran_b, main_rc;
static void case_a(void) { ran_a++; }
static void case_b(void) {
  ran_b++;
  CHECK_EQ(ran_b, 0); /* fails: counted in check_main's report */
}
static const check_case fake[] = {CHECK_CASE(case_a), CHECK_CASE(case_b)};
static char *fake_argv[4];
static int fake_argc;
static void call_main(void) { /* counters from 0 (capture restores them) */
  ran_a = ran_b = 0;
  check_failures_ = check_count_ = 0;
  main_rc = CHECK_MAIN(fake_argc, fake_argv, fake);
}
static void run_main(int argc, const char *a1, const char *a2) {
  fake_argv[0] = "test_fake";
  fake_argv[1] = (char *)a1;
  fake_argv[2] = (char *)a2;
  fake_argc = argc;
  capture(call_main);
}

static void test_main(void) {
  run_main(1, NULL, NULL); /* all */
  CHECK(ran_a == 1 && ran_b == 1);
  CHECK_EQ(main_rc, 1);
  CHECK(strstr(out, "CHECK_EQ failed: ran_b == 0: ran_b = 1, 0 = 0") != NULL);
  CHECK(strstr(out, "\n1 checks, 1 failed\n") != NULL);
  run_main(2, "case_a", NULL); /* one by name */
  CHECK(ran_a == 1 && ran_b == 0);
  CHECK_EQ(main_rc, 0);
  run_main(3, "case_b", "case_a"); /* in the order given */
  CHECK(ran_a == 1 && ran_b == 1);
  CHECK_EQ(main_rc, 1);
  run_main(3, "case_a", "nope"); /* unknown: nothing runs, the names listed */
  CHECK(ran_a == 0 && ran_b == 0);
  CHECK_EQ(main_rc, 2);
  CHECK(strstr(out, "unknown case 'nope'; the cases are: case_a case_b") != NULL);
  run_main(2, "--list", NULL);
  CHECK_EQ(main_rc, 0);
  CHECK_STREQ(out, "case_a\ncase_b\n");
  CHECK(ran_a == 0 && ran_b == 0);
}

static const check_case cases[] = {CHECK_CASE(test_pass), CHECK_CASE(test_fail),
                                   CHECK_CASE(test_once), CHECK_CASE(test_main)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
