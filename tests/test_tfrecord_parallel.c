/* Tests of the parallel input pipeline (issue 18 item 3): map with
 * num_parallel_calls gives the bytes of the sequential map, in order, over
 * elements and batches, and stops at the first failing element as map does;
 * the TFRecord parallel interleave gives the sequential interleave's order
 * (many cycle / block / thread counts, uneven and empty files, plain and
 * GZIP), the same error at the same element for a damaged file, and the same
 * skipped count with skip_corrupt; prefetch(ST_AUTOTUNE) deepens its queue
 * when the consumer outruns the producer and stays within its bounds; bad
 * arguments are refused. Files live in a mkdtemp directory removed at the
 * end. */
#define _POSIX_C_SOURCE 200809L
#include "strata/data.h"
#include "data/dataset_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "tmpdir.h"

#define XS 3 /* floats of x per example */

static st_example_spec spec(void) {
  st_example_spec s;
  memset(&s, 0, sizeof s);
  snprintf(s.x.name, sizeof s.x.name, "x");
  s.x.dtype = ST_FEATURE_FLOAT32;
  s.x.shape = (st_shape){1, {XS}};
  snprintf(s.y.name, sizeof s.y.name, "y");
  s.y.dtype = ST_FEATURE_INT64;
  return s;
}

/* Files stem-NN.tfrecord, file f holding per[f] examples numbered on from
 * the previous files: x = (n, n / 7, f), y = n. */
static void write_files(const char *stem, int nfiles, const int *per, st_compression c) {
  st_tfrecord_options o = st_tfrecord_default_options();
  o.compression = c;
  int64_t n = 0;
  for (int f = 0; f < nfiles; f++) {
    char name[64];
    snprintf(name, sizeof name, "%s-%02d.tfrecord", stem, f);
    st_tfrecord_writer *w = NULL;
    CHECK_OK(st_tfrecord_writer_create(tmp_path(name), &o, &w));
    for (int i = 0; i < per[f]; i++, n++) {
      float x[XS] = {(float)n, (float)n / 7.0f, (float)f};
      st_feature_value v[2] = {{"x", ST_FEATURE_FLOAT32, x, XS}, {"y", ST_FEATURE_INT64, &n, 1}};
      void *ex;
      size_t len;
      CHECK_OK(st_example_serialize(v, 2, &ex, &len));
      CHECK_OK(st_tfrecord_writer_write(w, ex, len));
      free(ex);
    }
    CHECK_OK(st_tfrecord_writer_close(w));
  }
}

static st_dataset *open_files(const char *stem, st_tfrecord_dataset_options o) {
  char pat[128];
  snprintf(pat, sizeof pat, "%s-*.tfrecord", stem);
  char **files;
  int nf;
  if (st_list_files(tmp_path(pat), false, 0, &files, &nf) != ST_OK) return NULL;
  o.spec = spec();
  st_dataset *ds = NULL;
  st_status s = st_dataset_tfrecord((const char *const *)files, nf, &o, &ds);
  st_list_files_free(files, nf);
  return s == ST_OK ? ds : NULL;
}

/* One pass: every item's x then y floats into out (cap floats); returns
 * the floats written, *status the pass's last status (its message kept in
 * msg when it failed). */
static size_t collect(st_dataset *ds, float *out, size_t cap, st_status *status, char *msg) {
  st_iterator *it = NULL;
  size_t n = 0;
  *status = st_dataset_iterate(ds, &it);
  size_t xs = 1, ys = st_dataset_y_size(ds);
  st_shape sh = st_dataset_x_shape(ds);
  for (int i = 0; i < sh.rank; i++) xs *= (size_t)sh.dims[i];
  while (*status == ST_OK) {
    st_batch b;
    bool end;
    if ((*status = st_iterator_next(it, &b, &end)) != ST_OK || end) break;
    for (int k = 0; k < b.size && n + xs + ys <= cap; k++) {
      memcpy(out + n, b.x + (size_t)k * xs, xs * sizeof(float));
      memcpy(out + n + xs, b.y + (size_t)k * ys, ys * sizeof(float));
      n += xs + ys;
    }
  }
  if (*status != ST_OK && msg) snprintf(msg, 512, "%s", st_last_error());
  st_iterator_destroy(it);
  return n;
}

#define CAP 20000

/* Parallel interleave = sequential interleave, element for element. */
static void test_interleave_order(void) {
  const int per[7] = {13, 0, 5, 21, 1, 8, 17}; /* uneven, one empty: 65 examples */
  write_files("il", 7, per, ST_COMPRESSION_NONE);
  write_files("ilgz", 7, per, ST_COMPRESSION_GZIP);
  static float want[CAP], got[CAP];
  const int cb[][2] = {{1, 1}, {2, 3}, {3, 1}, {4, 2}, {8, 5}, {7, 64}};
  const int threads[] = {1, 2, 3, ST_AUTOTUNE};
  for (int gz = 0; gz < 2; gz++)
    for (size_t c = 0; c < sizeof cb / sizeof *cb; c++) {
      st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
      o.record.compression = gz ? ST_COMPRESSION_GZIP : ST_COMPRESSION_NONE;
      o.cycle_length = cb[c][0];
      o.block_length = cb[c][1];
      st_status s;
      st_dataset *ds = open_files(gz ? "ilgz" : "il", o);
      CHECK(ds != NULL);
      if (!ds) return;
      size_t nw = collect(ds, want, CAP, &s, NULL);
      CHECK_OK(s);
      CHECK_EQ(nw, (size_t)65 * (XS + 1));
      st_dataset_destroy(ds);
      for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        o.num_parallel_calls = threads[t];
        ds = open_files(gz ? "ilgz" : "il", o);
        CHECK(ds != NULL);
        if (!ds) return;
        for (int pass = 0; pass < 2; pass++) { /* a second pass starts afresh */
          size_t ng = collect(ds, got, CAP, &s, NULL);
          CHECK_OK(s);
          CHECK_EQ(ng, nw);
          CHECK(memcmp(got, want, nw * sizeof(float)) == 0);
        }
        /* under batch and an autotuned prefetch: the same floats */
        CHECK_OK(st_dataset_batch(ds, 4, false, &ds));
        CHECK_OK(st_dataset_prefetch(ds, ST_AUTOTUNE, &ds));
        size_t ng = collect(ds, got, CAP, &s, NULL);
        CHECK_OK(s);
        CHECK_EQ(ng, nw);
        CHECK(memcmp(got, want, nw * sizeof(float)) == 0);
        st_dataset_destroy(ds);
      }
    }
}

/* Flip a byte of file f's payload at offset off. */
static void flip(const char *name, long off) {
  FILE *fp = fopen(tmp_path(name), "r+b");
  CHECK(fp != NULL);
  if (!fp) return;
  fseek(fp, off, SEEK_SET);
  int ch = fgetc(fp);
  fseek(fp, off, SEEK_SET);
  fputc(ch ^ 0x40, fp);
  fclose(fp);
}

/* A damaged record: the same elements, then the same error (or, skipped,
 * the same elements and count) as the sequential interleave. */
static void test_interleave_damage(void) {
  const int per[4] = {6, 9, 4, 7};
  write_files("dm", 4, per, ST_COMPRESSION_NONE);
  flip("dm-01.tfrecord", 5 * 40 + 30); /* inside a record of file 1 (records ~40 bytes) */
  static float want[CAP], got[CAP];
  for (int skip = 0; skip < 2; skip++) {
    st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
    o.record.skip_corrupt = skip;
    o.cycle_length = 3;
    o.block_length = 2;
    char wmsg[512] = "", gmsg[512] = "";
    st_status ws, gs;
    st_dataset *ds = open_files("dm", o);
    size_t nw = collect(ds, want, CAP, &ws, wmsg);
    int64_t wskip = st_dataset_tfrecord_skipped(ds);
    st_dataset_destroy(ds);
    CHECK_EQ(ws, skip ? ST_OK : ST_ERR_FORMAT);
    CHECK(nw < (size_t)26 * (XS + 1)); /* the damage cost something */
    if (skip) CHECK_GE(wskip, 1);
    else CHECK(strstr(wmsg, "dm-01.tfrecord") != NULL);
    o.num_parallel_calls = 3;
    ds = open_files("dm", o);
    size_t ng = collect(ds, got, CAP, &gs, gmsg);
    CHECK_EQ(gs, ws);
    CHECK_EQ(ng, nw);
    CHECK(memcmp(got, want, nw * sizeof(float)) == 0);
    CHECK_STREQ(gmsg, wmsg);
    CHECK_EQ(st_dataset_tfrecord_skipped(ds), wskip);
    st_dataset_destroy(ds);
  }
  /* a file that cannot be opened: the error comes at its turn */
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  o.cycle_length = 2;
  o.num_parallel_calls = 2;
  const char *files[3] = {tmp_path("dm-00.tfrecord"), tmp_path("missing.tfrecord"),
                          tmp_path("dm-02.tfrecord")};
  o.spec = spec();
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_tfrecord(files, 3, &o, &ds));
  char msg[512] = "";
  st_status s;
  size_t n = collect(ds, got, CAP, &s, msg);
  CHECK_NE(s, ST_OK);
  CHECK_EQ(n, (size_t)1 * (XS + 1)); /* block 1: file 0's first element, then file 1's turn */
  CHECK(strstr(msg, "missing.tfrecord") != NULL);
  st_dataset_destroy(ds);
}

/* A pure per-element function; fails on the label in *user (if >= 0). */
static st_status mangle(void *user, float *x, size_t xs, float *y, size_t ys) {
  (void)ys;
  if (user && *(const int *)user >= 0 && y[0] == (float)*(const int *)user)
    return st_error(ST_ERR_INVALID, "label %d refused", *(const int *)user);
  for (size_t i = 0; i < xs; i++) x[i] = sinf(x[i] * 1.37f + y[0]) * 3.0f + (float)i;
  y[0] = y[0] * 2.0f + 1.0f;
  return ST_OK;
}

static st_dataset *slices(int n, st_tensor *x, st_tensor *y) {
  *x = (st_tensor){ST_F32, 2, {n, 5}, malloc((size_t)n * 5 * sizeof(float))};
  *y = (st_tensor){ST_F32, 1, {n}, malloc((size_t)n * sizeof(float))};
  for (int i = 0; i < n * 5; i++) ((float *)x->data)[i] = (float)i * 0.25f;
  for (int i = 0; i < n; i++) ((float *)y->data)[i] = (float)i;
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(x, y, 1.0f, true, &ds));
  st_tensor_destroy(x);
  st_tensor_destroy(y);
  return ds;
}

/* map_parallel = map, byte for byte, on elements and on batches, and as the
 * input of a batch (next_into). */
static void test_map_parallel_bytes(void) {
  static float want[CAP], got[CAP];
  st_tensor x, y;
  int none = -1;
  const int threads[] = {1, 2, 5, ST_AUTOTUNE};
  for (int batched = 0; batched < 3; batched++) {
    st_dataset *ds = slices(997, &x, &y);
    if (batched == 1) CHECK_OK(st_dataset_batch(ds, 7, false, &ds));
    CHECK_OK(st_dataset_map(ds, mangle, &none, &ds));
    if (batched == 2) CHECK_OK(st_dataset_batch(ds, 7, false, &ds));
    st_status s;
    size_t nw = collect(ds, want, CAP, &s, NULL);
    CHECK_OK(s);
    CHECK_EQ(nw, (size_t)997 * 6);
    st_dataset_destroy(ds);
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
      ds = slices(997, &x, &y);
      if (batched == 1) CHECK_OK(st_dataset_batch(ds, 7, false, &ds));
      CHECK_OK(st_dataset_map_parallel(ds, mangle, &none, threads[t], &ds));
      if (batched == 2) CHECK_OK(st_dataset_batch(ds, 7, false, &ds));
      CHECK_EQ(st_dataset_cardinality(ds), batched ? 143 : 997);
      for (int pass = 0; pass < 2; pass++) {
        size_t ng = collect(ds, got, CAP, &s, NULL);
        CHECK_OK(s);
        CHECK_EQ(ng, nw);
        CHECK(memcmp(got, want, nw * sizeof(float)) == 0);
      }
      st_dataset_destroy(ds);
    }
  }
}

/* A failing element: the elements before it, then its error; an iterator
 * destroyed early joins its workers. */
static void test_map_parallel_error(void) {
  static float got[CAP];
  st_tensor x, y;
  int bad = 500;
  st_dataset *ds = slices(997, &x, &y);
  CHECK_OK(st_dataset_map_parallel(ds, mangle, &bad, 4, &ds));
  st_status s;
  char msg[512] = "";
  size_t n = collect(ds, got, CAP, &s, msg);
  CHECK_EQ(s, ST_ERR_INVALID);
  CHECK_EQ(n, (size_t)500 * 6);
  CHECK(strstr(msg, "map callback: label 500 refused") != NULL);
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  st_batch b;
  bool end;
  CHECK_OK(st_iterator_next(it, &b, &end));
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
}

static st_status slow(void *user, float *x, size_t xs, float *y, size_t ys) {
  (void)user, (void)x, (void)xs, (void)y, (void)ys;
  struct timespec t = {0, 1000000}; /* 1 ms */
  nanosleep(&t, NULL);
  return ST_OK;
}

/* A consumer faster than the producer: the autotuned queue deepens past its
 * starting depth, never past its bound; the items are unchanged. */
static void test_prefetch_autotune(void) {
  st_tensor x, y;
  st_dataset *ds = slices(150, &x, &y);
  CHECK_OK(st_dataset_map(ds, slow, NULL, &ds));
  CHECK_OK(st_dataset_prefetch(ds, ST_AUTOTUNE, &ds));
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  int n = 0, depth0 = st__prefetch_depth(it, NULL, NULL);
  for (;;) {
    st_batch b;
    bool end;
    CHECK_OK(st_iterator_next(it, &b, &end));
    if (end) break;
    CHECK_EQ(b.y[0], (float)n);
    n++;
  }
  int buffers, depth = st__prefetch_depth(it, &buffers, NULL);
  CHECK_EQ(n, 150);
  CHECK_GE(depth0, 1);
  CHECK_GT(depth, depth0);
  CHECK_LE(depth, 64);
  CHECK_LE(buffers, depth + 1);
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
}

static void test_bad_arguments(void) {
  st_tensor x, y;
  st_dataset *ds = slices(10, &x, &y), *out = ds;
  CHECK_EQ(st_dataset_map_parallel(ds, mangle, NULL, 0, &out), ST_ERR_INVALID);
  CHECK(out == NULL);
  CHECK(strstr(st_last_error(), "num_parallel_calls 0") != NULL);
  ds = slices(10, &x, &y);
  CHECK_EQ(st_dataset_map_parallel(ds, NULL, NULL, 2, &out), ST_ERR_INVALID);
  ds = slices(10, &x, &y);
  CHECK_EQ(st_dataset_prefetch(ds, -2, &out), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "buffer_size -2") != NULL);
  const int per[1] = {1};
  write_files("bad", 1, per, ST_COMPRESSION_NONE);
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  o.num_parallel_calls = -5;
  CHECK(open_files("bad", o) == NULL);
  CHECK(strstr(st_last_error(), "num_parallel_calls -5") != NULL);
}

int main(int argc, char **argv) {
  if (!tmpdir_make("strata_tfrp")) return 1;
  static const check_case cases[] = {
      CHECK_CASE(test_interleave_order),   CHECK_CASE(test_interleave_damage),
      CHECK_CASE(test_map_parallel_bytes), CHECK_CASE(test_map_parallel_error),
      CHECK_CASE(test_prefetch_autotune),  CHECK_CASE(test_bad_arguments),
  };
  int rc = CHECK_MAIN(argc, argv, cases);
  tmpdir_remove();
  return rc;
}
