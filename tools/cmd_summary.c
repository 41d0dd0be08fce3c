/* strata summary: a model's Keras-style summary, and its Keras 3 JSON. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "outputs.h"

st_status cli_create_model(const char *name, st_model_options mo, st_model **model) {
  if (!cli_is_json_model(name)) return st_builtin_model_create(name, &mo, model);
  mo.name = NULL;
  return st_model_from_keras_json(name, &mo, model);
}

/* ---- summary ---- */
typedef struct summary_cfg {
  const char *model;
  const char *keras_json;
} summary_cfg;

static cli_opt summary_opts[] = {
    CLI_OPT_STR("--model", "NAME", summary_cfg, model, "built-in model mlp, cnn (default), resnet20 or mobilenet-tiny, or a Keras FILE.json"),
    CLI_OPT_STR("--keras-json", "FILE", summary_cfg, keras_json, "also write the model as Keras 3 JSON (model.to_json()) to FILE"),
};

static int write_text(FILE *f, void *text) { return fputs(text, f) < 0 ? -1 : 0; }

/* --keras-json: the model's Keras JSON, replaced atomically. */
static int write_keras_json(const st_model *m, const char *path) {
  char *json = NULL;
  st_status s = st_model_to_keras_json(m, &json);
  if (s == ST_OK) s = st_write_file_atomic(path, write_text, json);
  free(json);
  if (s == ST_OK) return EXIT_OK;
  fprintf(stderr, "strata summary: --keras-json %s: %s\n", path, st_last_error());
  return s == ST_ERR_IO ? EXIT_WRITE : EXIT_FAIL;
}
#define NSUMMARY ((int)(sizeof summary_opts / sizeof *summary_opts))

int cmd_summary(int argc, char **argv) {
  int rc = cli_parse("summary", "[--model mlp|cnn] [--keras-json FILE]", argc, argv, summary_opts,
                     NSUMMARY);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  summary_cfg c = {"cnn", NULL};
  if (!cli_store("summary", summary_opts, NSUMMARY, &c)) return EXIT_USAGE;
  const char *name = c.model;
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  st_model *m = NULL;
  if (cli_is_json_model(name) && !cli_check_readable("summary", "--model", name))
    return EXIT_USAGE;
  cli_path out = {"--keras-json", c.keras_json}, in = {"--model", name};
  if (c.keras_json && !cli_check_outputs("summary", &out, 1, NULL, 0, &in, 1, NULL))
    return EXIT_USAGE;
  st_status s = cli_create_model(name, mo, &m);
  if (s != ST_OK) return cli_fail("summary", s);
  char *text = NULL;
  s = st_model_summary(m, &text);
  if (s == ST_OK) fputs(text, stdout);
  rc = s == ST_OK ? EXIT_OK : cli_fail("summary", s);
  if (rc == EXIT_OK && c.keras_json) rc = write_keras_json(m, c.keras_json);
  free(text);
  st_model_destroy(m);
  return rc;
}
