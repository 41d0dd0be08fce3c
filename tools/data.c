/* Loading Fashion-MNIST style IDX data for the CLI and turning it into the
 * train / validation / test pipelines (bytes stay bytes; uint8 pixels are
 * scaled to [0,1] as batches are made, float32 images are used as they are). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "outputs.h"

#define FASHION_MNIST_DIR CLI_FASHION_MNIST_DIR

/* Labels must be class indices of the 10-way models: checked before training so
 * a bad file is rejected with nothing written. */
static int check_labels(const char *cmd, const char *what, const st_tensor *y) {
  const uint8_t *v = y->data;
  for (int64_t i = 0; i < y->dims[0]; i++)
    if (v[i] >= 10) {
      fprintf(stderr, "strata %s: %s labels: label %u of example %lld is out of range for a "
              "model with 10 classes\n", cmd, what, v[i], (long long)i);
      return EXIT_USAGE;
    }
  return EXIT_OK;
}

/* View images [n,h,w] as [n,h,w,1], the built-in models' input; same bytes. */
static void shape_images(st_tensor *t) {
  if (t->rank != 3) return;
  t->dims[3] = 1;
  t->rank = 4;
}

static st_status make_pipelines(cli_data *d);

static st_status slices(const st_tensor *x, const st_tensor *y, int64_t skip, int64_t take,
                        st_dataset **out) {
  float scale = x->dtype == ST_U8 ? 1.0f / 255.0f : 1.0f;
  st_status s = st_dataset_from_tensor_slices(x, y, scale, false, out);
  if (s == ST_OK && skip > 0) s = st_dataset_skip(*out, skip, out);
  if (s == ST_OK && take >= 0) s = st_dataset_take(*out, take, out);
  return s;
}

/* The training set (the first n examples of raw.train) in a line: a backup
 * records it, so a resume on other data is refused. */
static void fingerprint(cli_data *d, int64_t n) {
  const st_tensor *x = &d->raw.train_x, *y = &d->raw.train_y;
  size_t xb = st_tensor_count(x) / (size_t)x->dims[0] * st_dtype_size(x->dtype);
  size_t yb = st_tensor_count(y) / (size_t)y->dims[0] * st_dtype_size(y->dtype);
  uint32_t crc = 0;
  int64_t ends[2] = {0, n - 1};
  for (int i = 0; i < 2; i++) {
    crc = st_crc32c(crc, (const char *)x->data + (size_t)ends[i] * xb, xb);
    crc = st_crc32c(crc, (const char *)y->data + (size_t)ends[i] * yb, yb);
  }
  int len = snprintf(d->fingerprint, sizeof d->fingerprint, "%lld examples of ", (long long)n);
  for (int k = 1; k < x->rank && len > 0 && (size_t)len < sizeof d->fingerprint; k++)
    len += snprintf(d->fingerprint + len, sizeof d->fingerprint - (size_t)len, "%s%lld",
                    k > 1 ? "x" : "", (long long)x->dims[k]);
  if (len > 0 && (size_t)len < sizeof d->fingerprint)
    snprintf(d->fingerprint + len, sizeof d->fingerprint - (size_t)len,
             " %s, first and last CRC32C 0x%08x", st_dtype_name(x->dtype), (unsigned)crc);
}

int cli_load_data(const char *cmd, const char *spec, double val_split, int64_t train_examples,
                  int batch, uint64_t seed, bool allow_nonfinite, cli_data *d) {
  memset(d, 0, sizeof *d);
  const char *dir = strcmp(spec, "fashion-mnist") == 0 ? FASHION_MNIST_DIR : spec;
  st_idx_options io = {.allow_nonfinite = allow_nonfinite};
  st_status s = st_mnist_load_ex(dir, &io, &d->raw);
  if (s != ST_OK) {
    fprintf(stderr, "strata %s: --data %s: %s\n", cmd, spec, st_last_error());
    if (s == ST_ERR_NONFINITE && !strcmp(cmd, "train"))
      fprintf(stderr, "strata %s: to train on non-finite values anyway, add --allow-nonfinite\n", cmd);
    if (!strcmp(spec, "fashion-mnist"))
      fprintf(stderr, "strata %s: install the dataset with: apt-get install dataset-fashion-mnist\n", cmd);
    return s == ST_ERR_NOMEM ? EXIT_FAIL : EXIT_USAGE;
  }
  if (check_labels(cmd, "train", &d->raw.train_y) || check_labels(cmd, "test", &d->raw.test_y)) {
    cli_free_data(d);
    return EXIT_USAGE;
  }
  shape_images(&d->raw.train_x);
  shape_images(&d->raw.test_x);
  int64_t n = d->raw.train_x.dims[0];
  if (train_examples > 0 && train_examples < n) n = train_examples;
  /* Keras's rounding, as st_fit_options.validation_split. */
  d->n_train = val_split > 0 ? (int64_t)floor((double)n * (1.0 - val_split)) : n;
  d->n_val = n - d->n_train;
  if (d->n_train <= 0) {
    fprintf(stderr, "strata %s: --validation-split %g leaves no training examples\n", cmd, val_split);
    cli_free_data(d);
    return EXIT_USAGE;
  }
  fingerprint(d, d->n_train);
  d->batch = batch;
  d->seed = seed;
  s = make_pipelines(d);
  if (s != ST_OK) {
    int rc = cli_fail(cmd, s);
    cli_free_data(d);
    return rc;
  }
  return EXIT_OK;
}

/* The batched train / validation / test pipelines over d->raw. */
static st_status make_pipelines(cli_data *d) {
  int batch = d->batch;
  uint64_t seed = d->seed;
  /* Keras takes the validation split from the end, before shuffling. */
  st_status s = slices(&d->raw.train_x, &d->raw.train_y, 0, d->n_train, &d->train);
  int64_t buf = d->shuffle_buffer ? d->shuffle_buffer : d->n_train;
  if (s == ST_OK && buf > 0) s = st_dataset_shuffle(d->train, buf, seed, true, &d->train);
  if (s == ST_OK) s = st_dataset_batch(d->train, batch, false, &d->train);
  if (s == ST_OK && d->n_val > 0) {
    s = slices(&d->raw.train_x, &d->raw.train_y, d->n_train, d->n_val, &d->val);
    if (s == ST_OK) s = st_dataset_batch(d->val, batch > 256 ? batch : 256, false, &d->val);
  }
  if (s == ST_OK) s = slices(&d->raw.test_x, &d->raw.test_y, 0, -1, &d->test);
  if (s == ST_OK) s = st_dataset_batch(d->test, batch > 256 ? batch : 256, false, &d->test);
  return s;
}

/* [n, h, w, 1] images viewed as [n, h*w]: same bytes. */
static void flatten_images(st_tensor *t) {
  if (t->rank != 4) return;
  t->dims[1] *= t->dims[2] * t->dims[3];
  t->rank = 2;
}

int cli_match_model_input(const char *cmd, cli_data *d, st_shape input) {
  st_tensor *x = &d->raw.train_x;
  if (input.rank != 1 || x->rank != 4 || (int64_t)st_shape_size(input) != x->dims[1] * x->dims[2])
    return EXIT_OK; /* the images as they are: fit names any mismatch */
  st_dataset_destroy(d->train);
  st_dataset_destroy(d->val);
  st_dataset_destroy(d->test);
  d->train = d->val = d->test = NULL;
  flatten_images(&d->raw.train_x);
  flatten_images(&d->raw.test_x);
  st_status s = make_pipelines(d);
  return s == ST_OK ? EXIT_OK : cli_fail(cmd, s);
}

int cli_set_shuffle_buffer(const char *cmd, cli_data *d, long long n) {
  st_dataset_destroy(d->train);
  st_dataset_destroy(d->val);
  st_dataset_destroy(d->test);
  d->train = d->val = d->test = NULL;
  d->shuffle_buffer = n;
  st_status s = make_pipelines(d);
  return s == ST_OK ? EXIT_OK : cli_fail(cmd, s);
}

void cli_free_data(cli_data *d) {
  st_dataset_destroy(d->train);
  st_dataset_destroy(d->val);
  st_dataset_destroy(d->test);
  st_mnist_destroy(&d->raw);
  memset(d, 0, sizeof *d);
}
