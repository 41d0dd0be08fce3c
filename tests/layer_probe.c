/* layer_probe: runs one layer, made by the Keras layer importer, forward and
 * backward on given data, for tests/test_torch_layers.py (the PyTorch
 * comparison). Test helper, not installed.
 *
 *   layer_probe [--backend NAME] CASE.json DATA.bin OUT.bin
 *   layer_probe --describe CASE.json
 *
 * CASE.json: {"layer": {"class_name": ..., "config": {...}}, "inputs":
 * [[per-example shape of input 0], ...], "batch": B}.
 * DATA.bin (little-endian float32, in this order): each input [B, shape_j];
 * each parameter in the layer's order (trainable and state alike, its shape);
 * dy [B, out]. The layer runs forward (training) and backward with dy; OUT.bin
 * gets y, then dx of each input, then dw of each trainable parameter.
 * --describe prints {"params": [{"name", "shape", "trainable"}, ...],
 * "output": [...]} on stdout. NAME: "cpu" (default) or "reference".
 * Exit 0, or 1 with a message on stderr (also when backward wrote to dy). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/keras.h"
#include "nn/layer.h"

static int fail(const char *what, const char *detail) {
  fprintf(stderr, "layer_probe: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  return 1;
}

/* The case's layer, built for its inputs (*batch examples). */
static int load_case(const char *path, st_layer **out, int *batch) {
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) return fail(path, je.text);
  const json_t *ins = json_object_get(root, "inputs");
  json_int_t b = json_integer_value(json_object_get(root, "batch"));
  size_t n = json_array_size(ins);
  st_shape shapes[ST_LAYER_MAX_INPUTS];
  int rc = 0;
  if (n < 1 || n > ST_LAYER_MAX_INPUTS || b < 1 || b > 1 << 20)
    rc = fail(path, "expected \"inputs\" (1 to 8 shapes) and \"batch\" (a positive integer)");
  for (size_t j = 0; rc == 0 && j < n; j++) {
    const json_t *s = json_array_get(ins, j);
    memset(&shapes[j], 0, sizeof shapes[j]);
    shapes[j].rank = (int)json_array_size(s);
    if (shapes[j].rank < 1 || shapes[j].rank > ST_MAX_RANK) rc = fail(path, "bad input shape");
    for (int d = 0; rc == 0 && d < shapes[j].rank; d++)
      shapes[j].dims[d] = (int)json_integer_value(json_array_get(s, (size_t)d));
  }
  st__keras_ctx c = {.file = path, .index = 0};
  st__keras_layer k;
  if (rc == 0 && (st__keras_parse_layer(&c, json_object_get(root, "layer"), &k) != ST_OK ||
                  st__keras_make_layer(&c, &k, shapes[0], out) != ST_OK))
    rc = fail("import", st_last_error());
  if (rc == 0 && st__layer_build_inputs(*out, shapes, (int)n) != ST_OK)
    rc = fail("build", st_last_error());
  *batch = (int)b;
  json_decref(root);
  return rc;
}

static void print_shape(st_shape s) {
  printf("[");
  for (int d = 0; d < s.rank; d++) printf("%s%d", d ? ", " : "", s.dims[d]);
  printf("]");
}

static int describe(const st_layer *l) {
  printf("{\"params\": [");
  for (int p = 0; p < l->nparams; p++) {
    printf("%s{\"name\": \"%s\", \"shape\": ", p ? ", " : "", l->params[p].name);
    print_shape(l->params[p].shape);
    printf(", \"trainable\": %s}", l->params[p].trainable ? "true" : "false");
  }
  printf("], \"output\": ");
  print_shape(l->out_shape);
  printf("}\n");
  return 0;
}

/* Every buffer of one call; sizes in floats. */
typedef struct probe {
  size_t nx[ST_LAYER_MAX_INPUTS], nw[ST_LAYER_MAX_PARAMS], ny;
  float *x[ST_LAYER_MAX_INPUTS], *dx[ST_LAYER_MAX_INPUTS];
  float *w[ST_LAYER_MAX_PARAMS], *dw[ST_LAYER_MAX_PARAMS];
  float *y, *dy, *dy_copy, *cache, *ws;
} probe;

static float *zalloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static bool read_floats(FILE *f, float *dst, size_t n) { return fread(dst, 4, n, f) == n; }

/* Reads DATA.bin into freshly allocated buffers; the file must hold exactly them. */
static int read_data(const char *path, const st_layer *l, int batch, probe *p) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(path, "cannot open");
  bool ok = true;
  for (int j = 0; j < l->n_inputs; j++) {
    p->nx[j] = (size_t)batch * st_shape_size(l->in_shapes[j]);
    p->x[j] = zalloc(p->nx[j]), p->dx[j] = zalloc(p->nx[j]);
    ok = ok && read_floats(f, p->x[j], p->nx[j]);
  }
  for (int i = 0; i < l->nparams; i++) {
    p->nw[i] = st_shape_size(l->params[i].shape);
    p->w[i] = zalloc(p->nw[i]);
    if (l->params[i].trainable) p->dw[i] = zalloc(p->nw[i]);
    ok = ok && read_floats(f, p->w[i], p->nw[i]);
  }
  p->ny = (size_t)batch * st_shape_size(l->out_shape);
  p->y = zalloc(p->ny), p->dy = zalloc(p->ny), p->dy_copy = zalloc(p->ny);
  ok = ok && read_floats(f, p->dy, p->ny);
  ok = ok && fgetc(f) == EOF;
  fclose(f);
  memcpy(p->dy_copy, p->dy, p->ny * sizeof(float));
  p->cache = zalloc((size_t)batch * l->cache_per_example);
  p->ws = zalloc(l->vt->workspace_floats ? l->vt->workspace_floats(l, batch) : 0);
  return ok ? 0 : fail(path, "size does not match the layer's inputs, parameters and dy");
}

static void run(const st_layer *l, int batch, const st_backend *be, st_backend_ctx *ctx,
                probe *p) {
  st_layer_args c;
  memset(&c, 0, sizeof c);
  c.be = be, c.ctx = ctx, c.batch = batch, c.training = true;
  for (int j = 0; j < l->n_inputs; j++) c.xs[j] = p->x[j], c.dxs[j] = p->dx[j];
  c.x = p->x[0], c.dx = p->dx[0];
  for (int i = 0; i < l->nparams; i++) c.w[i] = p->w[i], c.dw[i] = p->dw[i];
  c.y = p->y, c.dy = p->dy, c.cache = p->cache, c.workspace = p->ws;
  c.seed = 1234, c.stream = 77, c.global_batch = batch;
  l->vt->forward(l, &c);
  l->vt->backward(l, &c);
}

static int write_out(const char *path, const st_layer *l, const probe *p) {
  FILE *f = fopen(path, "wb");
  if (!f) return fail(path, "cannot create");
  bool ok = fwrite(p->y, 4, p->ny, f) == p->ny;
  for (int j = 0; j < l->n_inputs; j++) ok = ok && fwrite(p->dx[j], 4, p->nx[j], f) == p->nx[j];
  for (int i = 0; i < l->nparams; i++)
    if (p->dw[i]) ok = ok && fwrite(p->dw[i], 4, p->nw[i], f) == p->nw[i];
  ok = fclose(f) == 0 && ok;
  return ok ? 0 : fail(path, "write failed");
}

static void free_probe(probe *p) {
  for (int j = 0; j < ST_LAYER_MAX_INPUTS; j++) free(p->x[j]), free(p->dx[j]);
  for (int i = 0; i < ST_LAYER_MAX_PARAMS; i++) free(p->w[i]), free(p->dw[i]);
  free(p->y), free(p->dy), free(p->dy_copy), free(p->cache), free(p->ws);
}

int main(int argc, char **argv) {
  const char *backend = "cpu";
  if (argc >= 3 && strcmp(argv[1], "--backend") == 0) backend = argv[2], argv += 2, argc -= 2;
  st_layer *l = NULL;
  int batch = 0;
  if (argc == 3 && strcmp(argv[1], "--describe") == 0) {
    int rc = load_case(argv[2], &l, &batch);
    if (rc == 0) rc = describe(l);
    st_layer_destroy(l);
    return rc;
  }
  if (argc != 4) {
    fprintf(stderr, "usage: layer_probe [--backend cpu|reference] CASE.json DATA.bin OUT.bin\n"
                    "       layer_probe --describe CASE.json\n");
    return 1;
  }
  const st_backend *be = NULL;
  st_backend_ctx *ctx = NULL;
  if (st_backend_get(backend, &be) != ST_OK || st_backend_ctx_create(be, 0, 0, &ctx) != ST_OK)
    return fail("backend", st_last_error());
  probe p;
  memset(&p, 0, sizeof p);
  int rc = load_case(argv[1], &l, &batch);
  if (rc == 0) rc = read_data(argv[2], l, batch, &p);
  if (rc == 0) {
    run(l, batch, be, ctx, &p);
    if (memcmp(p.dy, p.dy_copy, p.ny * sizeof(float)) != 0)
      rc = fail(st_layer_class(l), "backward modified a read-only dy");
  }
  if (rc == 0) rc = write_out(argv[3], l, &p);
  free_probe(&p);
  st_layer_destroy(l);
  st_backend_ctx_destroy(ctx);
  return rc;
}
