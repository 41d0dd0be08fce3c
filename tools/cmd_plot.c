/* `strata plot REPORT.json -o FILE.svg [--title T]`: reads the per-epoch
 * history of a `strata train --report` file and draws its loss and accuracy
 * curves with st_plot_history_svg. Bad reports exit 2 naming the file and the
 * entry or field at fault; nothing is written then. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "plot"
#define USAGE "REPORT.json -o FILE.svg [--title T]"
#define REPORT_MAX_BYTES ((size_t)256 << 20) /* ~200 bytes an epoch */

/* A required number field: a JSON number, or null (a non-finite value the
 * report could not store; plotted as a gap). */
static bool num_field(const char *file, int i, json_t *e, const char *key, bool required,
                      double *out, bool *present) {
  json_t *v = json_object_get(e, key);
  *present = v != NULL;
  if (!v) {
    if (!required) return true;
    fprintf(stderr, "strata " CMD ": %s: history[%d] has no \"%s\"\n", file, i, key);
    return false;
  }
  if (json_is_null(v)) *out = NAN;
  else if (json_is_number(v)) *out = json_number_value(v);
  else {
    fprintf(stderr, "strata " CMD ": %s: history[%d].%s is not a number\n", file, i, key);
    return false;
  }
  return true;
}

/* The epoch number (1-based in the report, 0-based in st_epoch_logs). */
static bool epoch_field(const char *file, int i, json_t *e, int *out) {
  json_t *v = json_object_get(e, "epoch");
  if (!v) {
    *out = i;
    return true;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 100000000) {
    fprintf(stderr, "strata " CMD ": %s: history[%d].epoch is not an integer >= 1\n", file, i);
    return false;
  }
  *out = (int)json_integer_value(v) - 1;
  return true;
}

static bool read_entry(const char *file, int i, json_t *e, st_epoch_logs *l) {
  if (!json_is_object(e)) {
    fprintf(stderr, "strata " CMD ": %s: history[%d] is not an object\n", file, i);
    return false;
  }
  bool p, vl, va;
  double steps = -1;
  memset(l, 0, sizeof *l);
  l->val_loss = l->val_accuracy = l->lr = l->seconds = NAN;
  if (!epoch_field(file, i, e, &l->epoch) || !num_field(file, i, e, "loss", true, &l->loss, &p) ||
      !num_field(file, i, e, "accuracy", true, &l->accuracy, &p) ||
      !num_field(file, i, e, "val_loss", false, &l->val_loss, &vl) ||
      !num_field(file, i, e, "val_accuracy", false, &l->val_accuracy, &va) ||
      !num_field(file, i, e, "lr", false, &l->lr, &p) ||
      !num_field(file, i, e, "seconds", false, &l->seconds, &p) ||
      !num_field(file, i, e, "steps", false, &steps, &p))
    return false;
  l->has_validation = vl || va;
  l->steps = isfinite(steps) ? (int64_t)steps : -1;
  return true;
}

/* Fill h from the report's "history" array; false (message printed) on bad input. */
static bool read_history(const char *file, json_t *root, st_history *h) {
  json_t *arr = json_is_object(root) ? json_object_get(root, "history") : NULL;
  if (!json_is_array(arr)) {
    fprintf(stderr, "strata " CMD ": %s: no \"history\" array (is this a --report file?)\n",
            file);
    return false;
  }
  size_t n = json_array_size(arr);
  if (n == 0) {
    fprintf(stderr, "strata " CMD ": %s: \"history\" is empty: nothing to plot\n", file);
    return false;
  }
  if (n > 10000000) {
    fprintf(stderr, "strata " CMD ": %s: \"history\" has %zu entries (too many)\n", file, n);
    return false;
  }
  h->logs = calloc(n, sizeof *h->logs);
  if (!h->logs) {
    fprintf(stderr, "strata " CMD ": out of memory for %zu epochs\n", n);
    return false;
  }
  h->epochs = (int)n;
  for (size_t i = 0; i < n; i++)
    if (!read_entry(file, (int)i, json_array_get(arr, i), &h->logs[i])) return false;
  return true;
}

/* "<model> — <strategy>", either alone, or a generic title. */
static void default_title(json_t *root, char *buf, size_t n) {
  const char *model = json_string_value(json_object_get(root, "model"));
  const char *strategy = json_string_value(json_object_get(root, "strategy"));
  if (model && strategy) snprintf(buf, n, "%s \xe2\x80\x94 %s", model, strategy);
  else if (model || strategy) snprintf(buf, n, "%s", model ? model : strategy);
  else snprintf(buf, n, "training history");
}

static int plot(const char *file, const char *out, const char *title) {
  json_error_t jerr;
  char *text = NULL;
  size_t len = 0;
  st_status s = st_read_file(file, REPORT_MAX_BYTES, &text, &len);
  if (s != ST_OK) return cli_fail(CMD, s), EXIT_USAGE; /* an unreadable report is bad input */
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (!root) {
    fprintf(stderr, "strata " CMD ": %s: not valid JSON: line %d column %d: %s\n", file,
            jerr.line, jerr.column, jerr.text);
    return EXIT_USAGE;
  }
  st_history h = {0};
  char buf[512];
  int rc = EXIT_USAGE;
  if (read_history(file, root, &h)) {
    if (!title) default_title(root, buf, sizeof buf), title = buf;
    s = st_plot_history_svg(&h, title, out);
    rc = s == ST_OK ? EXIT_OK : s == ST_ERR_IO ? (cli_fail(CMD, s), EXIT_WRITE) : cli_fail(CMD, s);
  }
  free(h.logs);
  json_decref(root);
  return rc;
}

typedef struct plot_cfg {
  const char *out, *title;
} plot_cfg;

static cli_opt plot_opts[] = {
    CLI_OPT_STR("-o", "FILE.svg", plot_cfg, out, "write the SVG here (required)"),
    CLI_OPT_STR("--title", "T", plot_cfg, title, "title above the plots (default: \"<model> \xe2\x80\x94 <strategy>\")"),
};
#define NPLOT ((int)(sizeof plot_opts / sizeof *plot_opts))

int cmd_plot(int argc, char **argv) {
  const char *pos[1];
  int npos = 0;
  int rc = cli_parse_args(CMD, USAGE, argc, argv, plot_opts, NPLOT, pos, 1, &npos);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  plot_cfg c = {NULL, NULL};
  cli_store(CMD, plot_opts, NPLOT, &c); /* strings only: never fails */
  const char *out = c.out;
  if (npos != 1 || !out) {
    fprintf(stderr, "strata " CMD ": %s (usage: strata " CMD " " USAGE ")\n",
            npos != 1 ? "missing REPORT.json" : "missing -o FILE.svg");
    return EXIT_USAGE;
  }
  if (!out[0]) {
    fprintf(stderr, "strata " CMD ": -o: the output file name is empty\n");
    return EXIT_USAGE;
  }
  if (!cli_check_writable(CMD, "-o", out)) return EXIT_USAGE;
  return plot(pos[0], out, c.title);
}
