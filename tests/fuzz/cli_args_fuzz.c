/* libFuzzer target: the CLI's option parser (tools/args.c, compiled into the
 * target). The first byte picks how many positionals are allowed (0..3); the
 * rest, split at NUL bytes, is argv[2..] (at most 62 words). Traps when the
 * parser returns anything but OK / usage error / help, when an accepted
 * value does not point into argv, when cli_int accepts a value outside its
 * bounds, or when a --devices list over ST_MAX_REPLICAS entries is not refused
 * by st_strategy_create. The parser's messages go to stderr (the fuzzer's
 * log); --help's text to stdout, sent to /dev/null. */
#include "cli.h"
#include "fuzz_common.h"

static cli_opt cli_fuzz_opts_[] = {
    CLI_OPT_RAW("--epochs", "N", ""),
    CLI_OPT_RAW("--replicas", "N", ""),
    CLI_OPT_RAW("--seed", "S", ""),
    CLI_OPT_RAW("--lr", "X", ""),
    CLI_OPT_RAW("--devices", "LIST", ""),
    CLI_OPT_RAW("-o", "FILE", ""),
    CLI_OPT_RAW("--quiet", NULL, ""),
};
enum { CLI_FUZZ_NOPTS = sizeof cli_fuzz_opts_ / sizeof *cli_fuzz_opts_ };

static void cli_fuzz_require_(bool ok) {
  if (!ok) __builtin_trap();
}

static bool cli_fuzz_in_(const char *v, const char *buf, size_t size) {
  return v >= buf && v < buf + size;
}

/* The accepted values: bounds of the numbers, the limit on devices. */
static void cli_fuzz_values_(void) {
  static const struct { const char *name; long lo, hi; } ints[] = {
      {"--epochs", 1, 100000}, {"--replicas", 1, ST_MAX_REPLICAS}, {"--seed", 0, 0x7fffffffL}};
  for (size_t k = 0; k < sizeof ints / sizeof *ints; k++) {
    const char *v = cli_get(cli_fuzz_opts_, CLI_FUZZ_NOPTS, ints[k].name);
    long out = -7;
    if (v && cli_int("fuzz", ints[k].name, v, ints[k].lo, ints[k].hi, &out))
      cli_fuzz_require_(out >= ints[k].lo && out <= ints[k].hi);
    else
      cli_fuzz_require_(out == -7);
  }
  const char *v = cli_get(cli_fuzz_opts_, CLI_FUZZ_NOPTS, "--lr");
  double x = 0;
  if (v && cli_float("fuzz", "--lr", v, 1e-12, 1e6, &x)) cli_fuzz_require_(x >= 1e-12 && x <= 1e6);
  if (!(v = cli_get(cli_fuzz_opts_, CLI_FUZZ_NOPTS, "--devices"))) return;
  size_t n = *v != '\0';
  for (const char *p = v; (p = strchr(p, ',')) != NULL; p++) n += p[1] != '\0';
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  so.devices = v;
  st_strategy *s = NULL;
  st_status st = st_strategy_create(&so, &s);
  cli_fuzz_require_(n <= ST_MAX_REPLICAS || (st == ST_ERR_INVALID && !s));
  if (s) cli_fuzz_require_(st_strategy_num_replicas_in_sync(s) <= ST_MAX_REPLICAS);
  st_strategy_destroy(s);
}

int st_fuzz_cli_args(const uint8_t *data, size_t size) {
  st_fuzz_init_once();
  if (size == 0) return 0;
  char *buf = malloc(size), *argv[64] = {"strata", "fuzz"};
  if (!buf) return 0;
  memcpy(buf, data + 1, size - 1);
  buf[size - 1] = '\0'; /* the last word ends here */
  int argc = 2;
  for (char *p = buf; p < buf + size && argc < 64; p += strlen(p) + 1) argv[argc++] = p;
  if (size == 1) argc = 2;
  for (int i = 0; i < CLI_FUZZ_NOPTS; i++) cli_fuzz_opts_[i].value = NULL;
  const char *pos[3];
  int npos = 0, maxpos = data[0] % 4;
  int rc = cli_parse_args("fuzz", "", argc, argv, cli_fuzz_opts_, CLI_FUZZ_NOPTS, pos, maxpos,
                          &npos);
  cli_fuzz_require_(rc == EXIT_OK || rc == EXIT_USAGE || rc == -1);
  if (rc == EXIT_OK) {
    cli_fuzz_require_(npos >= 0 && npos <= maxpos);
    for (int j = 0; j < npos; j++) cli_fuzz_require_(cli_fuzz_in_(pos[j], buf, size));
    for (int i = 0; i < CLI_FUZZ_NOPTS; i++) {
      const char *v = cli_fuzz_opts_[i].value;
      if (v) cli_fuzz_require_(cli_fuzz_opts_[i].metavar ? cli_fuzz_in_(v, buf, size) : !strcmp(v, "1"));
    }
    cli_fuzz_values_();
  }
  free(buf);
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  return freopen("/dev/null", "w", stdout) ? 0 : 1; /* --help's text */
}
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return st_fuzz_cli_args(data, size); }
#endif
