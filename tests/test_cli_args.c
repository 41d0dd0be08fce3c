/* The CLI's option parser (tools/args.c) under seeded random argv vectors:
 * known option names (with a separate value or NAME=VALUE), unknown ones,
 * flags given values, repeats, missing values at the end, positionals,
 * --help, empty and very long strings, huge and negative numbers and device
 * lists of up to thousands of entries. Asserted: nothing crashes (ASan runs
 * this in CI), the result is always OK, usage error or help; an accepted argv
 * leaves every value pointing into the argv it came from; cli_int/cli_float
 * accept only values inside their declared bounds (and leave the output alone
 * otherwise); a --devices list over ST_MAX_REPLICAS entries is refused by
 * st_strategy_create with a message naming the limit. The parser's messages
 * (stderr) and --help (stdout) are sent to /dev/null while it runs.
 * STRATA_FUZZ_ITERS sets the number of random vectors (default 5000). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"

/* The parser's own messages (stderr) and --help (stdout) go to /dev/null
 * while it runs; the checks' messages stay visible. */
static int g_null = -1, g_saved_out = -1, g_saved_err = -1;
static void mute(void) {
  fflush(stdout);
  fflush(stderr);
  if (g_null < 0) {
    g_null = open("/dev/null", O_WRONLY);
    g_saved_out = dup(1);
    g_saved_err = dup(2);
  }
  dup2(g_null, 1);
  dup2(g_null, 2);
}
static void unmute(void) {
  fflush(stdout);
  fflush(stderr);
  dup2(g_saved_out, 1);
  dup2(g_saved_err, 2);
}

/* An option table of every kind the commands use: flags, valued options,
 * numeric ones with their bounds (lo..hi), a short name. */
typedef struct bounded {
  const char *name;
  long lo, hi;
} bounded;
static const bounded ints[] = {{"--epochs", 1, 100000},
                               {"--batch-size", 1, 1 << 20},
                               {"--replicas", 1, ST_MAX_REPLICAS},
                               {"--seed", 0, 0x7fffffffL},
                               {"--bytes-per-pack", 0, 1L << 40},
                               {"--keep", 0, 1000000}};
enum { NINTS = sizeof ints / sizeof *ints };
static cli_opt opts[] = {
    CLI_OPT_RAW("--epochs", "N", ""),
    CLI_OPT_RAW("--batch-size", "B", ""),
    CLI_OPT_RAW("--replicas", "N", ""),
    CLI_OPT_RAW("--seed", "S", ""),
    CLI_OPT_RAW("--bytes-per-pack", "N", ""),
    CLI_OPT_RAW("--keep", "N", ""),
    CLI_OPT_RAW("--lr", "X", ""),
    CLI_OPT_RAW("--devices", "LIST", ""),
    CLI_OPT_RAW("--model", "NAME", ""),
    CLI_OPT_RAW("-o", "FILE", ""),
    CLI_OPT_RAW("--quiet", NULL, ""),
    CLI_OPT_RAW("--no-overlap", NULL, ""),
};
enum { NOPTS = sizeof opts / sizeof *opts };

static uint64_t g_rng;
static uint64_t next(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int below(int n) { return (int)(next() % (uint64_t)n); }

/* Every string of one vector lives in one arena, freed together. */
static char *arena[64];
static int narena;
static char *keep(char *s) {
  if (narena < (int)(sizeof arena / sizeof *arena)) arena[narena++] = s;
  return s;
}
static char *dup_str(const char *s) { return keep(strdup(s)); }
static void free_arena(void) {
  while (narena) free(arena[--narena]);
}

/* "cpu:0,cpu:1,..." with n entries; every few, a broken entry or a repeat. */
static char *devices(int n, bool clean) {
  char *s = malloc((size_t)n * 16 + 2), *p = s;
  for (int i = 0; i < n; i++) {
    int k = clean ? i : below(8) ? i : below(4) ? 0 : -1;
    p += k >= 0 ? sprintf(p, "%scpu:%d", i ? "," : "", k) : sprintf(p, "%sgpu:x", i ? "," : "");
  }
  if (!clean && below(8) == 0) strcpy(p, ",");
  return keep(s);
}

static char *value(void) {
  static const char *const fixed[] = {
      "", "0", "1", "-1", "64", "65", "100", "+7", " 5", "5 ", "1e3", "0x10", "3.5", "nan",
      "inf", "-inf", "1e308", "1e-320", "9223372036854775807", "9223372036854775808",
      "-9223372036854775809", "99999999999999999999999999", "--epochs", "=", "a=b", "-",
      "--", "cpu:0", "\xff\xfe"};
  int k = below(12);
  if (k < 6) return dup_str(fixed[below((int)(sizeof fixed / sizeof *fixed))]);
  if (k < 8) {
    char b[48];
    long long x = (long long)next() >> below(63);
    snprintf(b, sizeof b, "%lld", below(2) ? x : -x);
    return dup_str(b);
  }
  if (k < 10) return devices(1 + below(below(4) ? 80 : 5000), below(2));
  size_t len = (size_t)below(below(4) ? 40 : 20000);
  char *s = malloc(len + 1);
  for (size_t i = 0; i < len; i++) s[i] = (char)(1 + below(255));
  s[len] = '\0';
  return keep(s);
}

static char *token(void) {
  int k = below(16);
  if (k < 7) return dup_str(opts[below(NOPTS)].name);
  if (k < 10) { /* NAME=VALUE */
    const char *n = opts[below(NOPTS)].name;
    char *v = value(), *s = malloc(strlen(n) + strlen(v) + 2);
    sprintf(s, "%s=%s", n, v);
    return keep(s);
  }
  if (k == 10) {
    static const char *const odd[] = {"--frobnicate", "-x", "--", "-", "--epoch", "--epochsx",
                                      "---epochs", "--help", "-h", "--EPOCHS", "="};
    return dup_str(odd[below((int)(sizeof odd / sizeof *odd))]);
  }
  return value();
}

static cli_opt *find_opt(const char *name) {
  for (int i = 0; i < NOPTS; i++)
    if (!strcmp(opts[i].name, name)) return &opts[i];
  return NULL;
}

/* v points into argv[2..argc) (inside the string, its terminator included). */
static bool in_argv(const char *v, int argc, char **argv) {
  for (int i = 2; i < argc; i++)
    if (v >= argv[i] && v <= argv[i] + strlen(argv[i])) return true;
  return false;
}

/* cli_int on v: accepted only inside [lo, hi], as strtol reads all of v;
 * refused: out untouched. */
static void check_int(const char *name, const char *v, long lo, long hi) {
  long out = LONG_MIN + 7;
  mute();
  bool ok = cli_int("fuzz", name, v, lo, hi, &out);
  unmute();
  char *end = NULL;
  errno = 0;
  long want = strtol(v, &end, 10);
  bool valid = !errno && end != v && !*end && want >= lo && want <= hi;
  CHECK_EQ(ok, valid);
  if (ok) {
    CHECK_GE(out, lo);
    CHECK_LE(out, hi);
    CHECK_EQ(out, want);
  } else {
    CHECK_EQ(out, LONG_MIN + 7);
  }
}

static void check_float(const char *v) {
  double out = -12345.0;
  mute();
  bool ok = cli_float("fuzz", "--lr", v, 1e-12, 1e6, &out);
  unmute();
  if (ok) {
    CHECK(isfinite(out));
    CHECK_GE(out, 1e-12);
    CHECK_LE(out, 1e6);
  } else {
    CHECK_EQ(out, -12345.0);
  }
}

/* --devices through the library: over the limit is refused naming it. */
static void check_devices(const char *list) {
  size_t n = *list != '\0';
  for (const char *p = list; (p = strchr(p, ',')); p++) n += p[1] != '\0';
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  so.devices = list;
  st_strategy *s = NULL;
  st_status st = st_strategy_create(&so, &s);
  if (n > ST_MAX_REPLICAS) {
    CHECK_EQ(st, ST_ERR_INVALID);
    CHECK(strstr(st_last_error(), "(ST_MAX_REPLICAS)") != NULL);
  }
  CHECK(st == ST_OK || st == ST_ERR_INVALID || st == ST_ERR_NOT_BUILT);
  CHECK_EQ(st == ST_OK, s != NULL);
  if (s) CHECK_LE(st_strategy_num_replicas_in_sync(s), ST_MAX_REPLICAS);
  st_strategy_destroy(s);
}

/* One parse of argv; the invariants of its result; the values through the
 * numeric readers and the strategy. */
static void check_vector(int argc, char **argv, int maxpos) {
  for (int i = 0; i < NOPTS; i++) opts[i].value = NULL;
  const char *pos[4] = {0};
  int npos = -1;
  mute();
  int rc = cli_parse_args("fuzz", "[OPTIONS]", argc, argv, opts, NOPTS, pos, maxpos, &npos);
  unmute();
  CHECK(rc == EXIT_OK || rc == EXIT_USAGE || rc == -1);
  bool help = false;
  for (int i = 2; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
  if (rc == -1) CHECK(help);
  if (argc > 2 && argv[2][0] == '-' && !help) { /* the first token is never a value */
    const char *eq = strchr(argv[2], '=');
    char name[32] = "";
    size_t len = eq ? (size_t)(eq - argv[2]) : strlen(argv[2]);
    if (len < sizeof name) memcpy(name, argv[2], len), name[len] = '\0';
    if (!find_opt(name)) CHECK_EQ(rc, EXIT_USAGE);
  }
  if (argc > 2 && argv[2][0] != '-' && maxpos == 0 && !help) CHECK_EQ(rc, EXIT_USAGE);
  if (rc != EXIT_OK) return;
  CHECK(npos >= 0 && npos <= maxpos);
  for (int j = 0; j < npos; j++) CHECK(pos[j] && pos[j][0] != '-' && in_argv(pos[j], argc, argv));
  for (int i = 0; i < NOPTS; i++) {
    const char *v = opts[i].value;
    if (!v) continue;
    if (!opts[i].metavar) CHECK_STREQ(v, "1");
    else CHECK(in_argv(v, argc, argv));
  }
  for (int k = 0; k < NINTS; k++) {
    const char *v = cli_get(opts, NOPTS, ints[k].name);
    if (v) check_int(ints[k].name, v, ints[k].lo, ints[k].hi);
  }
  const char *v = cli_get(opts, NOPTS, "--lr");
  if (v) check_float(v);
  if ((v = cli_get(opts, NOPTS, "--devices"))) check_devices(v);
}


static int run_vector(const char *const *words, int n, int maxpos) {
  char *argv[16] = {"strata", "fuzz"};
  for (int i = 0; i < n; i++) argv[2 + i] = (char *)words[i];
  for (int i = 0; i < NOPTS; i++) opts[i].value = NULL;
  const char *pos[4];
  int npos = 0;
  mute();
  int rc = cli_parse_args("fuzz", "", 2 + n, argv, opts, NOPTS, pos, maxpos, &npos);
  unmute();
  return rc;
}

/* Hand-written vectors with known results. */
static void test_known(void) {
  CHECK_EQ(run_vector((const char *[]){"--epochs", "3", "--quiet"}, 3, 0), EXIT_OK);
  CHECK_STREQ(cli_get(opts, NOPTS, "--epochs"), "3");
  CHECK_EQ(run_vector((const char *[]){"--epochs=3", "-o", "x"}, 3, 0), EXIT_OK);
  CHECK_STREQ(cli_get(opts, NOPTS, "-o"), "x");
  CHECK_EQ(run_vector((const char *[]){"--epochs"}, 1, 0), EXIT_USAGE);      /* no value */
  CHECK_EQ(run_vector((const char *[]){"--quiet=1"}, 1, 0), EXIT_USAGE);     /* flag value */
  CHECK_EQ(run_vector((const char *[]){"--quiet", "--quiet"}, 2, 0), EXIT_USAGE);
  CHECK_EQ(run_vector((const char *[]){"--frob"}, 1, 0), EXIT_USAGE);
  CHECK_EQ(run_vector((const char *[]){"--epoch", "3"}, 2, 0), EXIT_USAGE);  /* no prefixes */
  CHECK_EQ(run_vector((const char *[]){"a", "b"}, 2, 1), EXIT_USAGE);       /* one positional */
  CHECK_EQ(run_vector((const char *[]){"a", "--quiet"}, 2, 1), EXIT_OK);
  CHECK_EQ(run_vector((const char *[]){"a"}, 1, 0), EXIT_USAGE);
  CHECK_EQ(run_vector((const char *[]){"--frob", "--help"}, 2, 0), EXIT_USAGE); /* in order */
  CHECK_EQ(run_vector((const char *[]){"--help", "--frob"}, 2, 0), -1);
  CHECK_EQ(run_vector((const char *[]){"--model", "--quiet"}, 2, 0), EXIT_OK); /* a value */
  CHECK_STREQ(cli_get(opts, NOPTS, "--model"), "--quiet");
  CHECK_EQ(run_vector((const char *[]){""}, 1, 0), EXIT_USAGE);
  check_int("--replicas", "64", 1, ST_MAX_REPLICAS);
  check_int("--replicas", "65", 1, ST_MAX_REPLICAS);
  check_int("--replicas", "-1", 1, ST_MAX_REPLICAS);
  check_int("--replicas", "99999999999999999999", 1, ST_MAX_REPLICAS);
  check_int("--epochs", "", 1, 100000);
  check_int("--epochs", "1e3", 1, 100000);
  long out = 0;
  mute();
  bool refused = !cli_int("fuzz", "--replicas", "65", 1, ST_MAX_REPLICAS, &out);
  bool taken = cli_int("fuzz", "--replicas", "64", 1, ST_MAX_REPLICAS, &out);
  unmute();
  CHECK(refused && taken);
  CHECK_EQ(out, ST_MAX_REPLICAS);
  check_float("nan");
  check_float("1e999");
  check_float("-0.5");
}

/* STRATA_FUZZ_ITERS (default 5000) seeded random vectors of 0..12 tokens,
 * half of them with room for positionals. */
static void test_random(void) {
  const char *e = getenv("STRATA_FUZZ_ITERS");
  long iters = e ? strtol(e, NULL, 10) : 5000;
  g_rng = 12;
  for (long it = 0; it < iters; it++) {
    char *argv[16] = {"strata", "fuzz"};
    int argc = 2 + below(13);
    for (int i = 2; i < argc; i++) argv[i] = token();
    check_vector(argc, argv, below(2) ? 0 : below(4) + 1);
    free_arena();
  }
}

/* A table that stores into a struct (cli_store): strings, flags, numbers in
 * range (out of range: false, the field left alone), a handler. */
typedef struct table_cfg {
  const char *name;
  bool flag;
  long n;
  double x;
  int mode;
} table_cfg;
static bool store_mode(const char *cmd, const char *name, const char *v, void *f) {
  (void)cmd, (void)name;
  if (strcmp(v, "a") && strcmp(v, "b")) return false;
  *(int *)f = v[0] == 'a' ? 1 : 2;
  return true;
}
static cli_opt table_opts[] = {
    CLI_OPT_STR("--name", "S", table_cfg, name, ""),
    CLI_OPT_FLAG("--flag", table_cfg, flag, ""),
    CLI_OPT_INT("--n", "N", table_cfg, n, 1, 10, ""),
    CLI_OPT_FLOAT("--x", "X", table_cfg, x, 0, 1, ""),
    CLI_OPT_FN("--mode", "M", table_cfg, mode, store_mode, ""),
    CLI_OPT_RAW("--raw", "R", ""),
};
enum { NTABLE = sizeof table_opts / sizeof *table_opts };

static bool store_vector(const char *const *words, int n, table_cfg *c) {
  char *argv[16] = {"strata", "table"};
  for (int i = 0; i < n; i++) argv[2 + i] = (char *)words[i];
  for (int i = 0; i < NTABLE; i++) table_opts[i].value = NULL;
  *c = (table_cfg){"default", false, 5, 0.5, 0};
  mute();
  bool ok = cli_parse("table", "", 2 + n, argv, table_opts, NTABLE) == EXIT_OK &&
            cli_store("table", table_opts, NTABLE, c);
  unmute();
  return ok;
}

static void test_table(void) {
  table_cfg c;
  CHECK(store_vector((const char *[]){"--name", "x", "--flag", "--n", "7", "--x=0.25", "--mode", "b", "--raw", "r"}, 10, &c));
  CHECK_STREQ(c.name, "x");
  CHECK(c.flag);
  CHECK_EQ(c.n, 7);
  CHECK(c.x == 0.25);
  CHECK_EQ(c.mode, 2);
  CHECK_STREQ(cli_get(table_opts, NTABLE, "--raw"), "r");
  CHECK(store_vector(NULL, 0, &c)); /* nothing given: the defaults stay */
  CHECK_STREQ(c.name, "default");
  CHECK(!c.flag && c.n == 5 && c.x == 0.5 && c.mode == 0);
  CHECK(!store_vector((const char *[]){"--n", "11"}, 2, &c));
  CHECK_EQ(c.n, 5);
  CHECK(!store_vector((const char *[]){"--x", "1.5"}, 2, &c));
  CHECK(c.x == 0.5);
  CHECK(!store_vector((const char *[]){"--mode", "c"}, 2, &c));
  CHECK_EQ(c.mode, 0);
}

/* A name looked up that is not in the table (a misspelling in the CLI's
 * code) aborts instead of reading as "not given". */
static void test_misspelled_lookup(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    mute();
    (void)cli_get(opts, NOPTS, "--epoch");
    _exit(0);
  }
  int status = 0;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

static const check_case cases[] = {CHECK_CASE(test_known), CHECK_CASE(test_random),
                                   CHECK_CASE(test_table), CHECK_CASE(test_misspelled_lookup)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
