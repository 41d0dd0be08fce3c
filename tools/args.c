/* Option parsing and error reporting shared by the strata commands. */
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

void cli_print_help(const char *cmd, const char *usage, const cli_opt *opts, int nopts) {
  printf("usage: strata %s %s\n\noptions:\n", cmd, usage);
  for (int i = 0; i < nopts; i++) {
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", opts[i].name, opts[i].metavar ? " " : "",
             opts[i].metavar ? opts[i].metavar : "");
    printf("  %-26s %s\n", left, opts[i].help);
  }
  printf("  %-26s %s\n", "--help", "show this help");
}

static cli_opt *find(cli_opt *opts, int nopts, const char *name, size_t len) {
  for (int i = 0; i < nopts; i++)
    if (strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len)) return &opts[i];
  return NULL;
}

int cli_parse(const char *cmd, const char *usage, int argc, char **argv, cli_opt *opts,
              int nopts) {
  return cli_parse_args(cmd, usage, argc, argv, opts, nopts, NULL, 0, NULL);
}

/* One option at argv[*i] (advancing *i past its value); EXIT_OK or EXIT_USAGE. */
static int parse_opt(const char *cmd, int argc, char **argv, int *i, cli_opt *opts,
                     int nopts) {
  const char *a = argv[*i];
  const char *eq = strchr(a, '=');
  size_t len = eq ? (size_t)(eq - a) : strlen(a);
  cli_opt *o = a[0] == '-' ? find(opts, nopts, a, len) : NULL;
  if (!o) {
    fprintf(stderr, "strata %s: unknown option '%.*s' (see 'strata %s --help')\n", cmd,
            (int)len, a, cmd);
    return EXIT_USAGE;
  }
  if (o->value) {
    fprintf(stderr, "strata %s: option %s given twice\n", cmd, o->name);
    return EXIT_USAGE;
  }
  if (!o->metavar) {
    if (eq) {
      fprintf(stderr, "strata %s: option %s takes no value\n", cmd, o->name);
      return EXIT_USAGE;
    }
    o->value = "1";
  } else if (eq) {
    o->value = eq + 1;
  } else if (*i + 1 < argc) {
    o->value = argv[++*i];
  } else {
    fprintf(stderr, "strata %s: option %s needs a value (%s)\n", cmd, o->name, o->metavar);
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

int cli_parse_args(const char *cmd, const char *usage, int argc, char **argv, cli_opt *opts,
                   int nopts, const char **pos, int maxpos, int *npos) {
  if (npos) *npos = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      cli_print_help(cmd, usage, opts, nopts);
      return -1;
    }
    if (a[0] != '-' && maxpos > 0) {
      if (*npos >= maxpos) {
        fprintf(stderr, "strata %s: unexpected argument '%s' (see 'strata %s --help')\n", cmd,
                a, cmd);
        return EXIT_USAGE;
      }
      pos[(*npos)++] = a;
      continue;
    }
    int rc = parse_opt(cmd, argc, argv, &i, opts, nopts);
    if (rc != EXIT_OK) return rc;
  }
  return EXIT_OK;
}

const char *cli_get(const cli_opt *opts, int nopts, const char *name) {
  for (int i = 0; i < nopts; i++)
    if (!strcmp(opts[i].name, name)) return opts[i].value;
  fprintf(stderr, "strata: internal error: option '%s' is not in the option table\n", name);
  abort();
}

bool cli_lib_ok(const char *cmd, const char *name, st_status s) {
  if (s == ST_OK) return true;
  fprintf(stderr, "strata %s: %s: %s\n", cmd, name, st_last_error());
  return false;
}

/* One given option's value into its field of cfg. */
static bool store_one(const char *cmd, const cli_opt *o, char *cfg) {
  void *f = cfg + o->field;
  switch (o->kind) {
    case CLI_RAW:
      return true;
    case CLI_STR:
      *(const char **)f = o->value;
      return true;
    case CLI_FLAG:
      *(bool *)f = true;
      return true;
    case CLI_INT:
      return cli_int(cmd, o->name, o->value, (long)o->lo, (long)o->hi, f);
    case CLI_FLOAT:
      return cli_float(cmd, o->name, o->value, o->lo, o->hi, f);
    case CLI_FN:
      return o->fn(cmd, o->name, o->value, f);
  }
  abort(); /* a kind this switch does not know */
}

bool cli_store(const char *cmd, const cli_opt *opts, int nopts, void *cfg) {
  for (int i = 0; i < nopts; i++)
    if (opts[i].value && !store_one(cmd, &opts[i], cfg)) return false;
  return true;
}

bool cli_int(const char *cmd, const char *name, const char *v, long lo, long hi, long *out) {
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) {
    fprintf(stderr, "strata %s: %s: '%s' is not an integer in [%ld, %ld]\n", cmd, name, v, lo,
            hi);
    return false;
  }
  *out = x;
  return true;
}

bool cli_float(const char *cmd, const char *name, const char *v, double lo, double hi,
               double *out) {
  char *end = NULL;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi) {
    fprintf(stderr, "strata %s: %s: '%s' is not a number in [%g, %g]\n", cmd, name, v, lo, hi);
    return false;
  }
  *out = x;
  return true;
}

int cli_fail(const char *cmd, st_status s) {
  fprintf(stderr, "strata %s: %s\n", cmd, st_last_error()[0] ? st_last_error() : st_status_string(s));
  switch (s) {
    case ST_ERR_INVALID:
    case ST_ERR_FORMAT:
    case ST_ERR_NONFINITE:
    case ST_ERR_NOT_BUILT:
      return EXIT_USAGE;
    case ST_ERR_TIMEOUT:
    case ST_ERR_PEER:
      return EXIT_PEER;
    case ST_ERR_STOPPED:
      return EXIT_STOPPED;
    default:
      return EXIT_FAIL;
  }
}

bool cli_check_writable(const char *cmd, const char *opt, const char *path) {
  if (!path) return true;
  char *copy = strdup(path);
  if (!copy) return false;
  const char *dir = dirname(copy);
  struct stat st;
  /* access() alone passes an executable regular file for root */
  bool ok = access(dir, W_OK | X_OK) == 0;
  int err = errno;
  if (ok && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) ok = false, err = ENOTDIR;
  if (!ok)
    fprintf(stderr, "strata %s: %s %s: directory '%s' is not writable: %s\n", cmd, opt, path,
            dir, strerror(err));
  free(copy);
  return ok;
}

bool cli_check_readable(const char *cmd, const char *opt, const char *path) {
  struct stat st;
  int err = 0;
  if (stat(path, &st) != 0) err = errno;
  else if (S_ISDIR(st.st_mode)) err = EISDIR;
  else if (access(path, R_OK) != 0) err = errno;
  if (err) fprintf(stderr, "strata %s: %s %s: %s\n", cmd, opt, path, strerror(err));
  return err == 0;
}

bool cli_is_json_model(const char *name) {
  size_t len = strlen(name);
  return len > 5 && !strcmp(name + len - 5, ".json");
}
