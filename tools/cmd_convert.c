/* strata convert: IDX (a Fashion-MNIST style directory) or CSV data to N
 * TFRecord shards of tf.train.Example records, plain or GZIP, and the
 * --features spec that reads them back. Shard k holds the contiguous examples
 * [k*n/N, (k+1)*n/N), so reading the shards in name order gives the original
 * order. Features: IDX uint8 images -> "image" (one bytes value, raw pixels),
 * float32 images -> "image" (float_list); CSV -> "x" (float_list); labels ->
 * "label" (int64_list; a CSV label that is not an integer: float_list). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "outputs.h"

#define CONVERT_USAGE "--out PREFIX [--data fashion-mnist|DIR|FILE.csv] [--split train|test] [--shards N] [--compression gzip] ..."

/* What `strata convert` was given (convert_opts stores it). */
typedef struct convert_cfg {
  const char *src, *split, *out, *spec;
  long shards, limit;
  st_compression comp;
} convert_cfg;

static bool store_compression(const char *cmd, const char *name, const char *v, void *f) {
  return cli_lib_ok(cmd, name, st_compression_parse(v, f));
}

static cli_opt convert_opts[] = {
    CLI_OPT_STR("--data", "SRC", convert_cfg, src, "fashion-mnist (default), a DIR of MNIST-style IDX files, or a FILE.csv (last column the label)"),
    CLI_OPT_STR("--split", "S", convert_cfg, split, "IDX: train (default) or test"),
    CLI_OPT_STR("--out", "PREFIX", convert_cfg, out, "write PREFIX-00000-of-0000N.tfrecord[.gz] (required)"),
    CLI_OPT_INT("--shards", "N", convert_cfg, shards, 1, 100000, "number of files (default 1)"),
    CLI_OPT_FN("--compression", "C", convert_cfg, comp, store_compression, "none (default) or gzip"),
    CLI_OPT_INT("--examples", "N", convert_cfg, limit, 1, 1L << 40, "only the first N examples (default all)"),
    CLI_OPT_STR("--features", "FILE", convert_cfg, spec, "also write the --features spec for `strata train` to FILE (JSON)"),
};
#define NCONV ((int)(sizeof convert_opts / sizeof *convert_opts))

typedef struct conv_data {
  st_tensor x, y;           /* x u8/f32 [n, ...], y u8 or f32 [n] */
  bool csv;
  bool int_labels;          /* every label an integer: int64_list */
} conv_data;

static bool ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

static st_status load(const char *src, bool test, conv_data *c) {
  memset(c, 0, sizeof *c);
  if (ends_with(src, ".csv")) {
    st_csv_options o = st_csv_default_options();
    c->csv = true;
    st_status s = st_csv_read(src, &o, &c->x, &c->y);
    if (s != ST_OK) return s;
    const float *y = c->y.data;
    c->int_labels = true;
    for (int64_t i = 0; i < c->y.dims[0]; i++)
      if (y[i] != floorf(y[i]) || fabsf(y[i]) > 9e15f) c->int_labels = false;
    return ST_OK;
  }
  st_mnist m;
  const char *dir = strcmp(src, "fashion-mnist") ? src : CLI_FASHION_MNIST_DIR;
  st_status s = st_mnist_load(dir, &m);
  if (s != ST_OK) return s;
  c->x = test ? m.test_x : m.train_x;
  c->y = test ? m.test_y : m.train_y;
  st_tensor_destroy(test ? &m.train_x : &m.test_x);
  st_tensor_destroy(test ? &m.train_y : &m.test_y);
  c->int_labels = true;
  return ST_OK;
}

/* Example i of c serialized into *out. */
static st_status example(const conv_data *c, int64_t i, size_t row, void **out, size_t *size) {
  size_t es = st_dtype_size(c->x.dtype);
  st_feature_value f[2];
  f[0] = (st_feature_value){c->csv ? "x" : "image",
                            c->x.dtype == ST_U8 ? ST_FEATURE_UINT8 : ST_FEATURE_FLOAT32,
                            (const char *)c->x.data + (size_t)i * row * es, row};
  float yf = c->y.dtype == ST_U8 ? (float)((const uint8_t *)c->y.data)[i]
                                 : ((const float *)c->y.data)[i];
  int64_t yi = (int64_t)yf;
  f[1] = c->int_labels ? (st_feature_value){"label", ST_FEATURE_INT64, &yi, 1}
                       : (st_feature_value){"label", ST_FEATURE_FLOAT32, &yf, 1};
  return st_example_serialize(f, 2, out, size);
}

static st_status write_shard(const char *path, const conv_data *c, int64_t from, int64_t to,
                             size_t row, st_compression comp) {
  st_tfrecord_options o = st_tfrecord_default_options();
  o.compression = comp;
  st_tfrecord_writer *w = NULL;
  st_status s = st_tfrecord_writer_create(path, &o, &w);
  for (int64_t i = from; s == ST_OK && i < to; i++) {
    void *buf = NULL;
    size_t n = 0;
    if ((s = example(c, i, row, &buf, &n)) == ST_OK) s = st_tfrecord_writer_write(w, buf, n);
    free(buf);
  }
  if (s != ST_OK) {
    st_tfrecord_writer_destroy(w);
    return s;
  }
  return st_tfrecord_writer_close(w);
}

typedef struct spec_ctx {
  const conv_data *c;
} spec_ctx;

static int fill_spec(FILE *f, void *ctx) {
  const conv_data *c = ((spec_ctx *)ctx)->c;
  char shape[128];
  size_t len = 0;
  for (int i = 1; i < c->x.rank && len < sizeof shape; i++)
    len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", i > 1 ? ", " : "",
                            (long long)c->x.dims[i]);
  if (!c->csv && c->x.rank == 3 && len < sizeof shape) snprintf(shape + len, sizeof shape - len, ", 1");
  int r = fprintf(f, "{\"x\": {\"name\": \"%s\", \"dtype\": \"%s\", \"shape\": [%s]},\n"
                  " \"y\": {\"name\": \"label\", \"dtype\": \"%s\"}}\n",
                  c->csv ? "x" : "image", c->x.dtype == ST_U8 ? "uint8" : "float32", shape,
                  c->int_labels ? "int64" : "float32");
  return r < 0 ? -1 : 0;
}

/* The options into c; false (message printed) on a bad one. */
static bool parse_convert(convert_cfg *c) {
  const char *split = cli_get(convert_opts, NCONV, "--split");
  *c = (convert_cfg){"fashion-mnist", NULL, NULL, NULL, 1, 0, ST_COMPRESSION_NONE};
  if (!cli_get(convert_opts, NCONV, "--out")) {
    fprintf(stderr, "strata convert: --out PREFIX is required (see 'strata convert --help')\n");
    return false;
  }
  if (split && strcmp(split, "train") && strcmp(split, "test")) {
    fprintf(stderr, "strata convert: --split: expected train or test, got '%s'\n", split);
    return false;
  }
  return cli_store("convert", convert_opts, NCONV, c);
}

int cmd_convert(int argc, char **argv) {
  int rc = cli_parse("convert", CONVERT_USAGE, argc, argv, convert_opts, NCONV);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  convert_cfg o;
  if (!parse_convert(&o)) return EXIT_USAGE;
  const char *src = o.src, *out = o.out, *split = o.split, *spec = o.spec;
  long shards = o.shards, limit = o.limit;
  st_compression comp = o.comp;
  conv_data c;
  st_status s = load(src, split && !strcmp(split, "test"), &c);
  if (s != ST_OK) {
    fprintf(stderr, "strata convert: --data %s: %s\n", src, st_last_error());
    return s == ST_ERR_NOMEM ? EXIT_FAIL : EXIT_USAGE;
  }
  int64_t n = c.x.dims[0];
  if (limit > 0 && limit < n) n = limit;
  size_t row = st_tensor_count(&c.x) / (size_t)(c.x.dims[0] ? c.x.dims[0] : 1);
  rc = EXIT_OK;
  for (long k = 0; k < shards && rc == EXIT_OK; k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s-%05ld-of-%05ld.tfrecord%s", out, k, shards,
             comp == ST_COMPRESSION_GZIP ? ".gz" : "");
    s = write_shard(path, &c, n * k / shards, n * (k + 1) / shards, row, comp);
    if (s != ST_OK) {
      fprintf(stderr, "strata convert: %s\n", st_last_error());
      rc = s == ST_ERR_IO ? EXIT_WRITE : EXIT_FAIL;
    }
  }
  spec_ctx ctx = {&c};
  if (rc == EXIT_OK && spec && (s = st_write_file_atomic(spec, fill_spec, &ctx)) != ST_OK) {
    fprintf(stderr, "strata convert: --features: %s\n", st_last_error());
    rc = EXIT_WRITE;
  }
  if (rc == EXIT_OK)
    printf("wrote %lld examples to %ld shard%s %s-%05d-of-%05ld.tfrecord%s ...\n", (long long)n,
           shards, shards > 1 ? "s" : "", out, 0, shards, comp == ST_COMPRESSION_GZIP ? ".gz" : "");
  st_tensor_destroy(&c.x);
  st_tensor_destroy(&c.y);
  return rc;
}
