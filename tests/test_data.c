/* Tests of the data layer: dataset pipeline semantics (shuffle determinism and
 * coverage, batch remainders, repeat/take/skip/shard counts, map, prefetch,
 * cardinality, x_scale), IDX round trips and malformed IDX files, MNIST
 * directory loading and malformed CSV files. Test files live in a mkdtemp
 * directory under /tmp that is removed at the end. If Fashion-MNIST is
 * installed, it is loaded and one shuffled epoch of batches is timed. */
#define _POSIX_C_SOURCE 200809L
#include "strata/data.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "tmpdir.h"


static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(p, 1, n, f) == n);
  fclose(f);
}

static void write_gz(const char *path, const void *p, size_t n) {
  gzFile g = gzopen(path, "wb");
  CHECK(g != NULL);
  if (!g) return;
  CHECK(gzwrite(g, p, (unsigned)n) == (int)n);
  gzclose(g);
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static bool mkdir_p_ok(const char *dir) { return mkdir(dir, 0755) == 0; }

/* Remove a directory tree (files and subdirectories). */
static void rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[1024];
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) rm_tree(p);
    else unlink(p);
  }
  if (d) closedir(d);
  rmdir(dir);
}

static bool has(const char *needle) { return strstr(st_last_error(), needle) != NULL; }

#define CHECK_ERR(expr, status, ...)                                          \
  do {                                                                       \
    st_status s__ = (expr);                                                  \
    CHECK_MSG(s__ == (status), "%s -> %s (%s)", #expr, st_status_string(s__), \
              st_last_error());                                              \
    const char *needles__[] = {__VA_ARGS__};                                 \
    for (size_t i__ = 0; i__ < sizeof needles__ / sizeof *needles__; i__++)  \
      CHECK_MSG(has(needles__[i__]), "message '%s' lacks '%s'",              \
                st_last_error(), needles__[i__]);                            \
  } while (0)

/* ---- dataset helpers ---------------------------------------------------- */

/* x f32 [n, 2] = (i, -i), y f32 [n] = 10 i. */
static st_dataset *seq_ds(int n, float *xbuf, float *ybuf) {
  for (int i = 0; i < n; i++) {
    xbuf[2 * i] = (float)i;
    xbuf[2 * i + 1] = (float)-i;
    ybuf[i] = 10.0f * (float)i;
  }
  st_tensor x = {ST_F32, 2, {n, 2}, xbuf}, y = {ST_F32, 1, {n}, ybuf};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &y, 1.0f, true, &ds));
  return ds;
}

/* The transforms as expressions, for the pipelines below: each CHECKs the
 * status and returns the new handle (NULL after a failure, which the next
 * transform reports as a NULL input). */
static st_dataset *t_map(st_dataset *d, st_map_fn fn, void *user) {
  CHECK_OK(st_dataset_map(d, fn, user, &d));
  return d;
}
static st_dataset *t_shuffle(st_dataset *d, int64_t buffer, uint64_t seed, bool reshuffle) {
  CHECK_OK(st_dataset_shuffle(d, buffer, seed, reshuffle, &d));
  return d;
}
static st_dataset *t_batch(st_dataset *d, int batch, bool drop_remainder) {
  CHECK_OK(st_dataset_batch(d, batch, drop_remainder, &d));
  return d;
}
static st_dataset *t_repeat(st_dataset *d, int64_t count) {
  CHECK_OK(st_dataset_repeat(d, count, &d));
  return d;
}
static st_dataset *t_take(st_dataset *d, int64_t count) {
  CHECK_OK(st_dataset_take(d, count, &d));
  return d;
}
static st_dataset *t_skip(st_dataset *d, int64_t count) {
  CHECK_OK(st_dataset_skip(d, count, &d));
  return d;
}
static st_dataset *t_shard(st_dataset *d, int num_shards, int index) {
  CHECK_OK(st_dataset_shard(d, num_shards, index, &d));
  return d;
}
static st_dataset *t_prefetch(st_dataset *d, int buffer) {
  CHECK_OK(st_dataset_prefetch(d, buffer, &d));
  return d;
}

/* One pass: ids[k] = x[0] of the k-th example (checking x and y agree), batch
 * sizes into sizes (if set). Returns examples seen, or -1 on error. */
static int collect(st_dataset *ds, int *ids, int cap, int *sizes, int *nbatches) {
  st_iterator *it = NULL;
  if (st_dataset_iterate(ds, &it) != ST_OK) return -1;
  int n = 0, nb = 0;
  for (;;) {
    st_batch b;
    bool end = false;
    if (st_iterator_next(it, &b, &end) != ST_OK) {
      n = -1;
      break;
    }
    if (end) break;
    if (sizes && nb < cap) sizes[nb] = b.size;
    nb++;
    for (int k = 0; k < b.size; k++, n++) {
      if (n < cap) ids[n] = (int)b.x[2 * k];
      CHECK(b.x[2 * k + 1] == -b.x[2 * k]);
      CHECK(b.y[k] == 10.0f * b.x[2 * k]);
    }
  }
  st_iterator_destroy(it);
  if (nbatches) *nbatches = nb;
  return n;
}

static bool is_perm(const int *ids, int n) {
  char *seen = calloc((size_t)n, 1);
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    ok = ids[i] >= 0 && ids[i] < n && !seen[ids[i]];
    if (ok) seen[ids[i]] = 1;
  }
  free(seen);
  return ok;
}

static bool is_identity(const int *ids, int n) {
  for (int i = 0; i < n; i++)
    if (ids[i] != i) return false;
  return true;
}

static st_status identity_map(void *user, float *x, size_t xs, float *y, size_t ys) {
  return ST_OK;
}

/* ---- dataset tests ------------------------------------------------------ */

static void test_tensor_basics(void) {
  CHECK(st_dtype_size(ST_U8) == 1 && st_dtype_size(ST_F32) == 4 && st_dtype_size(ST_I32) == 4);
  CHECK_STREQ(st_dtype_name(ST_U8), "uint8");
  st_tensor t = {ST_U8, 3, {2, 3, 4}, NULL};
  CHECK(st_tensor_count(&t) == 24);
  t.data = st_alloc(24);
  st_tensor_destroy(&t);
  CHECK(t.data == NULL && t.rank == 0);
  st_tensor_destroy(NULL);
}

static void test_slices(void) {
  uint8_t px[2 * 2 * 3];
  for (int i = 0; i < 12; i++) px[i] = (uint8_t)(i * 20);
  int32_t lab[2] = {3, 7};
  st_tensor x = {ST_U8, 3, {2, 2, 3}, px}, y = {ST_I32, 1, {2}, lab};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &y, 1.0f / 255, true, &ds));
  px[0] = 99; /* copied: no effect */
  st_shape sh = st_dataset_x_shape(ds);
  CHECK(sh.rank == 2 && sh.dims[0] == 2 && sh.dims[1] == 3);
  CHECK_EQ(st_dataset_y_size(ds), 1);
  CHECK_EQ(st_dataset_cardinality(ds), 2);
  CHECK_EQ(st_dataset_batch_size(ds), 0);
  st_iterator *it = NULL;
  st_batch b;
  bool end = false;
  CHECK_OK(st_dataset_iterate(ds, &it));
  CHECK_OK(st_iterator_next(it, &b, &end));
  CHECK(!end && b.size == 1);
  CHECK_NEAR(b.x[0], 0.0, 1e-7);
  CHECK_NEAR(b.x[5], 100.0 / 255, 1e-6);
  CHECK_EQ(b.y[0], 3.0f);
  CHECK_OK(st_iterator_next(it, &b, &end));
  CHECK_NEAR(b.x[0], 120.0 / 255, 1e-6);
  CHECK_EQ(b.y[0], 7.0f);
  CHECK_OK(st_iterator_next(it, &b, &end));
  CHECK(end);
  st_iterator_destroy(it);
  st_dataset_destroy(ds);

  /* rank-1 x gives shape [1]; rank-2 y gives y_size = dims[1] */
  float xv[3] = {1, 2, 3}, yv[6] = {0};
  st_tensor x1 = {ST_F32, 1, {3}, xv}, y2 = {ST_F32, 2, {3, 2}, yv};
  CHECK_OK(st_dataset_from_tensor_slices(&x1, &y2, 2.0f, false, &ds));
  sh = st_dataset_x_shape(ds);
  CHECK(sh.rank == 1 && sh.dims[0] == 1);
  CHECK_EQ(st_dataset_y_size(ds), 2);
  CHECK_OK(st_dataset_iterate(ds, &it));
  CHECK_OK(st_iterator_next(it, &b, &end));
  CHECK(b.x[0] == 2.0f);
  st_iterator_destroy(it);
  st_dataset_destroy(ds);

  /* mismatched counts */
  st_tensor y3 = {ST_F32, 1, {2}, yv};
  CHECK_ERR(st_dataset_from_tensor_slices(&x1, &y3, 1.0f, false, &ds), ST_ERR_INVALID,
            "3", "2");
}

enum { N = 1000 };
static float g_x[2 * N], g_y[N];
static int ids_a[4 * N], ids_b[4 * N];

static void test_shuffle(void) {
  st_dataset *a = t_shuffle(seq_ds(N, g_x, g_y), N, 42, true);
  st_dataset *b = t_shuffle(seq_ds(N, g_x, g_y), N, 42, true);
  CHECK_EQ(st_dataset_cardinality(a), N);
  CHECK_EQ(collect(a, ids_a, N, NULL, NULL), N);
  CHECK_EQ(collect(b, ids_b, N, NULL, NULL), N);
  CHECK(is_perm(ids_a, N) && !is_identity(ids_a, N));
  CHECK(memcmp(ids_a, ids_b, sizeof(int) * N) == 0); /* same seed, same epoch */
  CHECK_EQ(collect(a, ids_b, N, NULL, NULL), N);       /* epoch 1 */
  CHECK(is_perm(ids_b, N));
  CHECK(memcmp(ids_a, ids_b, sizeof(int) * N) != 0);
  st_dataset_destroy(a);
  st_dataset_destroy(b);

  /* no reshuffle: every epoch the same; another seed: another order */
  a = t_shuffle(seq_ds(N, g_x, g_y), 1 << 30, 42, false);
  collect(a, ids_a, N, NULL, NULL);
  collect(a, ids_b, N, NULL, NULL);
  CHECK(memcmp(ids_a, ids_b, sizeof(int) * N) == 0);
  st_dataset_destroy(a);
  a = t_shuffle(seq_ds(N, g_x, g_y), N, 43, false);
  collect(a, ids_b, N, NULL, NULL);
  CHECK(memcmp(ids_a, ids_b, sizeof(int) * N) != 0);
  st_dataset_destroy(a);
}

/* The fast path (over slices) and the general path (over map) agree, for a
 * full and a small buffer; a small buffer still yields each element once. */
static void test_shuffle_paths(void) {
  int64_t bufs[3] = {N, 10, 1};
  for (int i = 0; i < 3; i++) {
    st_dataset *fast = t_shuffle(seq_ds(N, g_x, g_y), bufs[i], 7, true);
    st_dataset *gen = t_shuffle(
        t_map(seq_ds(N, g_x, g_y), identity_map, NULL), bufs[i], 7, true);
    for (int epoch = 0; epoch < 2; epoch++) {
      CHECK_EQ(collect(fast, ids_a, N, NULL, NULL), N);
      CHECK_EQ(collect(gen, ids_b, N, NULL, NULL), N);
      CHECK(is_perm(ids_a, N));
      CHECK(memcmp(ids_a, ids_b, sizeof(int) * N) == 0);
      CHECK(bufs[i] == 1 ? is_identity(ids_a, N) : !is_identity(ids_a, N));
    }
    st_dataset_destroy(fast);
    st_dataset_destroy(gen);
  }
  /* over take/skip/shard chains (the fast path's index views) */
  for (int i = 0; i < 3; i++) {
    st_dataset *v[2];
    for (int g = 0; g < 2; g++) {
      st_dataset *d = seq_ds(N, g_x, g_y);
      if (g) d = t_map(d, identity_map, NULL);
      if (i == 0) d = t_take(t_skip(d, 100), 700);   /* 100..799 */
      if (i == 1) d = t_shard(t_skip(d, 10), 3, 2);  /* 12, 15, ... */
      if (i == 2) d = t_skip(t_shard(t_take(d, 500), 4, 1), 5);
      v[g] = t_shuffle(d, i == 2 ? 7 : N, 21, true);
    }
    int want = i == 0 ? 700 : i == 1 ? 330 : 120;
    CHECK_EQ(st_dataset_cardinality(v[0]), want);
    CHECK_EQ(collect(v[0], ids_a, N, NULL, NULL), want);
    CHECK_EQ(collect(v[1], ids_b, N, NULL, NULL), want);
    CHECK(memcmp(ids_a, ids_b, sizeof(int) * (size_t)want) == 0);
    int lo = i == 0 ? 100 : i == 1 ? 12 : 21, step = i == 0 ? 1 : i == 1 ? 3 : 4;
    int seen[N] = {0};
    bool ok = true;
    for (int k = 0; k < want; k++) {
      int r = ids_a[k] - lo;
      ok = ok && r >= 0 && r % step == 0 && r / step < want && !seen[r / step]++;
    }
    CHECK(ok);
    st_dataset_destroy(v[0]);
    st_dataset_destroy(v[1]);
  }
  /* a small buffer only moves elements a bounded distance ahead */
  st_dataset *s = t_shuffle(seq_ds(N, g_x, g_y), 10, 1, true);
  collect(s, ids_a, N, NULL, NULL);
  bool bounded = true;
  for (int k = 0; k < N; k++) bounded = bounded && ids_a[k] <= k + 9;
  CHECK(bounded);
  st_dataset_destroy(s);
  /* shuffling batches (general path over a batched input) */
  s = t_shuffle(t_batch(seq_ds(10, g_x, g_y), 4, false), 5, 3, true);
  int sizes[8], nb = 0;
  CHECK(collect(s, ids_a, N, sizes, &nb) == 10 && nb == 3);
  CHECK_EQ(sizes[0] + sizes[1] + sizes[2], 10);
  st_dataset_destroy(s);
}

static void test_batch(void) {
  int sizes[8], nb = 0;
  st_dataset *d = t_batch(seq_ds(10, g_x, g_y), 4, false);
  CHECK(st_dataset_cardinality(d) == 3 && st_dataset_batch_size(d) == 4);
  CHECK_EQ(collect(d, ids_a, N, sizes, &nb), 10);
  CHECK(nb == 3 && sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 2);
  CHECK(is_identity(ids_a, 10));
  st_dataset_destroy(d);
  d = t_batch(seq_ds(10, g_x, g_y), 4, true);
  CHECK_EQ(st_dataset_cardinality(d), 2);
  CHECK_EQ(collect(d, ids_a, N, sizes, &nb), 8);
  CHECK(nb == 2 && sizes[0] == 4 && sizes[1] == 4);
  /* a transform that fails destroys its input (ASan checks the leak) and
   * writes NULL, even over the input's handle */
  CHECK(st_dataset_batch(d, 2, false, &d) == ST_ERR_INVALID && d == NULL);
  CHECK(has("already batched"));
  st_dataset *out = (st_dataset *)g_x; /* a stale handle: overwritten with NULL */
  CHECK(st_dataset_batch(seq_ds(3, g_x, g_y), 0, false, &out) == ST_ERR_INVALID && !out);
  CHECK(has("batch_size 0"));
  CHECK(st_dataset_shuffle(NULL, 3, 1, true, &out) == ST_ERR_INVALID && !out);
  CHECK(has("st_dataset_shuffle: ds (the input dataset) is NULL"));
  /* a NULL out: refused, and the input is still destroyed (ASan: no leak) */
  CHECK(st_dataset_shuffle(seq_ds(3, g_x, g_y), 3, 1, true, NULL) == ST_ERR_INVALID);
  CHECK(has("st_dataset_shuffle: out is NULL"));
  CHECK(st_dataset_repeat(seq_ds(3, g_x, g_y), -5, &out) == ST_ERR_INVALID && !out);
  CHECK(st_dataset_shard(seq_ds(3, g_x, g_y), 2, 2, &out) == ST_ERR_INVALID && !out);
}

static void test_counts(void) {
  st_dataset *d = t_repeat(seq_ds(10, g_x, g_y), 3);
  CHECK_EQ(st_dataset_cardinality(d), 30);
  CHECK_EQ(collect(d, ids_a, 4 * N, NULL, NULL), 30);
  CHECK(ids_a[10] == 0 && ids_a[29] == 9);
  st_dataset_destroy(d);
  d = t_take(t_repeat(seq_ds(10, g_x, g_y), -1), 25);
  CHECK_EQ(st_dataset_cardinality(d), 25);
  CHECK_EQ(collect(d, ids_a, N, NULL, NULL), 25);
  st_dataset_destroy(d);
  d = t_repeat(seq_ds(10, g_x, g_y), -1);
  CHECK_EQ(st_dataset_cardinality(d), -1);
  st_dataset_destroy(d);
  d = t_skip(seq_ds(10, g_x, g_y), 3);
  CHECK_EQ(st_dataset_cardinality(d), 7);
  CHECK(collect(d, ids_a, N, NULL, NULL) == 7 && ids_a[0] == 3);
  st_dataset_destroy(d);
  struct { int64_t n; bool take; int64_t want; } cases[] = {
      {-1, false, 0}, {20, false, 0}, {-1, true, 10}, {0, true, 0}, {20, true, 10}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    d = cases[i].take ? t_take(seq_ds(10, g_x, g_y), cases[i].n)
                      : t_skip(seq_ds(10, g_x, g_y), cases[i].n);
    CHECK_EQ(st_dataset_cardinality(d), cases[i].want);
    CHECK_EQ(collect(d, ids_a, N, NULL, NULL), cases[i].want);
    st_dataset_destroy(d);
  }
  d = t_repeat(seq_ds(10, g_x, g_y), 0);
  CHECK(st_dataset_cardinality(d) == 0 && collect(d, ids_a, N, NULL, NULL) == 0);
  st_dataset_destroy(d);
  /* repeat of an empty dataset forever ends */
  d = t_repeat(t_take(seq_ds(10, g_x, g_y), 0), -1);
  CHECK_EQ(collect(d, ids_a, N, NULL, NULL), 0);
  st_dataset_destroy(d);
  /* repeat reshuffles each repetition */
  d = t_repeat(t_shuffle(seq_ds(N, g_x, g_y), N, 5, true), 2);
  CHECK_EQ(collect(d, ids_a, 4 * N, NULL, NULL), 2 * N);
  CHECK(is_perm(ids_a, N) && is_perm(ids_a + N, N));
  CHECK(memcmp(ids_a, ids_a + N, sizeof(int) * N) != 0);
  st_dataset_destroy(d);
  /* batch after repeat crosses pass boundaries like tf.data */
  d = t_batch(t_repeat(seq_ds(10, g_x, g_y), 2), 4, false);
  int sizes[8], nb;
  CHECK(collect(d, ids_a, N, sizes, &nb) == 20 && nb == 5 && sizes[4] == 4);
  st_dataset_destroy(d);
}

static void test_shard(void) {
  enum { S = 3, M = 10 };
  int count[M] = {0};
  int64_t want_card[S] = {4, 3, 3};
  for (int i = 0; i < S; i++) {
    st_dataset *d = t_shard(seq_ds(M, g_x, g_y), S, i);
    CHECK_EQ(st_dataset_cardinality(d), want_card[i]);
    int n = collect(d, ids_a, N, NULL, NULL);
    CHECK(n == want_card[i]);
    for (int k = 0; k < n; k++) {
      CHECK(ids_a[k] % S == i);
      count[ids_a[k]]++;
    }
    st_dataset_destroy(d);
  }
  for (int k = 0; k < M; k++) CHECK(count[k] == 1);
  /* shard of a shuffle: fast (skip) and general paths agree, shards cover */
  int all[N] = {0};
  for (int i = 0; i < 4; i++) {
    st_dataset *f = t_shard(t_shuffle(seq_ds(N, g_x, g_y), N, 9, false), 4, i);
    st_dataset *g = t_shard(
        t_shuffle(t_map(seq_ds(N, g_x, g_y), identity_map, NULL), N, 9, false),
        4, i);
    int n = collect(f, ids_a, N, NULL, NULL);
    CHECK(n == N / 4 && collect(g, ids_b, N, NULL, NULL) == n);
    CHECK(memcmp(ids_a, ids_b, sizeof(int) * (size_t)n) == 0);
    for (int k = 0; k < n; k++) all[ids_a[k]]++;
    st_dataset_destroy(f);
    st_dataset_destroy(g);
  }
  bool once = true;
  for (int k = 0; k < N; k++) once = once && all[k] == 1;
  CHECK(once);
}

typedef struct map_state {
  int calls;
  int fail_at; /* -1 = never */
} map_state;

static st_status add_map(void *user, float *x, size_t xs, float *y, size_t ys) {
  map_state *m = user;
  if (m->calls++ == m->fail_at) return st_error(ST_ERR_INVALID, "element refused");
  for (size_t i = 0; i < xs; i++) x[i] *= 2;
  y[0] *= 2;
  return ST_OK;
}

static void test_map(void) {
  map_state m = {0, -1};
  st_dataset *d = t_batch(t_map(seq_ds(10, g_x, g_y), add_map, &m), 4, false);
  CHECK_EQ(collect(d, ids_a, N, NULL, NULL), 10); /* collect checks y == 10 x, x1 == -x0 */
  CHECK(m.calls == 10);
  CHECK(ids_a[3] == 6);
  st_dataset_destroy(d);
  /* map after batch: per example */
  m.calls = 0;
  d = t_map(t_batch(seq_ds(10, g_x, g_y), 4, false), add_map, &m);
  CHECK(collect(d, ids_a, N, NULL, NULL) == 10 && m.calls == 10 && ids_a[9] == 18);
  st_dataset_destroy(d);
  /* a failing callback stops the pass with its error, also through shuffle */
  m = (map_state){0, 3};
  d = t_map(seq_ds(10, g_x, g_y), add_map, &m);
  CHECK_EQ(collect(d, ids_a, N, NULL, NULL), -1);
  CHECK(has("element refused"));
  st_dataset_destroy(d);
  for (int fail_at = 2; fail_at <= 7; fail_at += 5) {
    m = (map_state){0, fail_at};
    d = t_shuffle(t_map(seq_ds(10, g_x, g_y), add_map, &m), 5, 1, true);
    CHECK_EQ(collect(d, ids_a, N, NULL, NULL), -1);
    CHECK(has("element refused"));
    st_dataset_destroy(d);
  }
}

static void test_prefetch(void) {
  st_dataset *plain = t_batch(t_shuffle(seq_ds(N, g_x, g_y), N, 11, true),
                                       32, false);
  st_dataset *pre = t_prefetch(
      t_batch(t_shuffle(seq_ds(N, g_x, g_y), N, 11, true), 32, false), 3);
  CHECK(st_dataset_cardinality(pre) == 32 && st_dataset_batch_size(pre) == 32);
  for (int epoch = 0; epoch < 3; epoch++) {
    int sa[64], sb[64], na, nb;
    CHECK_EQ(collect(plain, ids_a, N, sa, &na), N);
    CHECK_EQ(collect(pre, ids_b, N, sb, &nb), N);
    CHECK(na == nb && memcmp(sa, sb, sizeof(int) * (size_t)na) == 0);
    CHECK(memcmp(ids_a, ids_b, sizeof(int) * N) == 0);
  }
  /* early destroy: after one batch, and before any */
  for (int k = 0; k < 2; k++) {
    st_iterator *it;
    st_batch b;
    bool end;
    CHECK_OK(st_dataset_iterate(pre, &it));
    if (k == 0) CHECK_OK(st_iterator_next(it, &b, &end));
    st_iterator_destroy(it);
  }
  st_dataset_destroy(plain);
  st_dataset_destroy(pre);
  /* unbatched prefetch of an infinite stream, destroyed early */
  pre = t_prefetch(t_repeat(seq_ds(10, g_x, g_y), -1), 1);
  st_iterator *it;
  CHECK_OK(st_dataset_iterate(pre, &it));
  st_batch b;
  bool end;
  for (int i = 0; i < 25; i++) {
    CHECK_OK(st_iterator_next(it, &b, &end));
    CHECK(b.size == 1 && (int)b.x[0] == i % 10);
  }
  st_iterator_destroy(it);
  st_dataset_destroy(pre);
  /* errors cross the thread, after the items produced before them */
  map_state m = {0, 5};
  pre = t_prefetch(t_map(seq_ds(10, g_x, g_y), add_map, &m), 4);
  st_clear_error();
  CHECK_EQ(collect(pre, ids_a, N, NULL, NULL), -1);
  CHECK(has("element refused"));
  CHECK(ids_a[4] == 8);
  st_dataset_destroy(pre);
}

/* ---- IDX ---------------------------------------------------------------- */

static void test_idx_roundtrip(void) {
  const char *names[4] = {"rt_u8.idx", "rt_u8.idx.gz", "rt_f32.idx", "rt_f32.idx.gz"};
  uint8_t px[3 * 4 * 5];
  float fv[6] = {1.5f, -2.25f, 0.0f, 1e30f, -1e-30f, 42.0f};
  int32_t iv[3] = {-1, 0, 0x12345678};
  for (int i = 0; i < 60; i++) px[i] = (uint8_t)(i * 7);
  st_tensor tu = {ST_U8, 3, {3, 4, 5}, px}, tf = {ST_F32, 2, {2, 3}, fv};
  for (int i = 0; i < 4; i++) {
    const st_tensor *t = i < 2 ? &tu : &tf;
    const char *p = tmp_path(names[i]);
    CHECK_OK(st_idx_write(p, t));
    st_tensor r;
    CHECK_OK(st_idx_read(p, &r));
    CHECK(r.dtype == t->dtype && r.rank == t->rank);
    CHECK(memcmp(r.dims, t->dims, sizeof(int64_t) * (size_t)t->rank) == 0);
    CHECK(r.data && memcmp(r.data, t->data, st_tensor_count(t) * st_dtype_size(t->dtype)) == 0);
    st_tensor_destroy(&r);
  }
  /* the .gz one really is gzip; i32 round trip */
  FILE *f = fopen(tmp_path("rt_u8.idx.gz"), "rb");
  CHECK(f && fgetc(f) == 0x1f && fgetc(f) == 0x8b);
  if (f) fclose(f);
  st_tensor ti = {ST_I32, 1, {3}, iv}, r;
  CHECK_OK(st_idx_write(tmp_path("rt_i32.idx"), &ti));
  CHECK_OK(st_idx_read(tmp_path("rt_i32.idx"), &r));
  CHECK(r.dtype == ST_I32 && r.data && memcmp(r.data, iv, sizeof iv) == 0);
  st_tensor_destroy(&r);
  /* no temp files left behind */
  DIR *d = opendir(g_dir);
  struct dirent *e;
  while (d && (e = readdir(d))) CHECK_MSG(!strstr(e->d_name, ".tmp."), "left %s", e->d_name);
  if (d) closedir(d);
}

static void test_idx_bad(void) {
  st_tensor t;
  CHECK_ERR(st_idx_read(tmp_path("nope.idx"), &t), ST_ERR_IO, "nope.idx");
  unsigned char magic[] = {0x01, 0x02, 0x08, 0x01, 0, 0, 0, 1, 5};
  write_bytes(tmp_path("magic.idx"), magic, sizeof magic);
  CHECK_ERR(st_idx_read(tmp_path("magic.idx"), &t), ST_ERR_FORMAT, "magic.idx", "offset 0",
            "0x01020801");
  unsigned char dtype[] = {0, 0, 0x09, 0x01, 0, 0, 0, 1, 5};
  write_bytes(tmp_path("dtype.idx"), dtype, sizeof dtype);
  CHECK_ERR(st_idx_read(tmp_path("dtype.idx"), &t), ST_ERR_FORMAT, "dtype.idx", "offset 2",
            "0x09");
  unsigned char rank0[] = {0, 0, 0x08, 0x00, 5};
  write_bytes(tmp_path("rank0.idx"), rank0, sizeof rank0);
  CHECK_ERR(st_idx_read(tmp_path("rank0.idx"), &t), ST_ERR_FORMAT, "rank0.idx", "offset 3",
            "rank 0");
  unsigned char rank255[] = {0, 0, 0x08, 0xff, 0, 0, 0, 1};
  write_bytes(tmp_path("rank255.idx"), rank255, sizeof rank255);
  CHECK_ERR(st_idx_read(tmp_path("rank255.idx"), &t), ST_ERR_FORMAT, "offset 3", "255");
  unsigned char dim0[] = {0, 0, 0x08, 0x02, 0, 0, 0, 1, 0, 0, 0, 0};
  write_bytes(tmp_path("dim0.idx"), dim0, sizeof dim0);
  CHECK_ERR(st_idx_read(tmp_path("dim0.idx"), &t), ST_ERR_FORMAT, "offset 8", "dimension 1");
  unsigned char shorthdr[] = {0, 0, 0x08, 0x03, 0, 0, 0, 1};
  write_bytes(tmp_path("shorthdr.idx"), shorthdr, sizeof shorthdr);
  CHECK_ERR(st_idx_read(tmp_path("shorthdr.idx"), &t), ST_ERR_FORMAT, "shorthdr.idx",
            "truncated");
  write_bytes(tmp_path("empty.idx"), "", 0);
  CHECK_ERR(st_idx_read(tmp_path("empty.idx"), &t), ST_ERR_FORMAT, "empty.idx", "offset 0");
  /* rank 3 [2,2,2] u8: 16-byte header + 8 bytes */
  unsigned char good[24] = {0, 0, 0x08, 0x03, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2};
  write_bytes(tmp_path("trunc.idx"), good, 20);
  CHECK_ERR(st_idx_read(tmp_path("trunc.idx"), &t), ST_ERR_FORMAT, "trunc.idx", "truncated",
            "expected 8 bytes of payload after offset 16", "offset 20");
  write_gz(tmp_path("trunc.idx.gz"), good, 20);
  CHECK_ERR(st_idx_read(tmp_path("trunc.idx.gz"), &t), ST_ERR_FORMAT, "trunc.idx.gz",
            "truncated", "after offset 16");
  unsigned char longer[26] = {0, 0, 0x08, 0x03, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2};
  write_bytes(tmp_path("trail.idx"), longer, sizeof longer);
  CHECK_ERR(st_idx_read(tmp_path("trail.idx"), &t), ST_ERR_FORMAT, "trail.idx", "trailing",
            "offset 24");
  write_gz(tmp_path("trail.idx.gz"), longer, sizeof longer);
  CHECK_ERR(st_idx_read(tmp_path("trail.idx.gz"), &t), ST_ERR_FORMAT, "trail.idx.gz",
            "trailing", "offset 24");
  write_bytes(tmp_path("ok.idx"), good, sizeof good);
  CHECK_OK(st_idx_read(tmp_path("ok.idx"), &t));
  st_tensor_destroy(&t);
  unsigned char over[] = {0, 0, 0x0D, 0x04, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                          0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4};
  write_bytes(tmp_path("over.idx"), over, sizeof over);
  CHECK_ERR(st_idx_read(tmp_path("over.idx"), &t), ST_ERR_FORMAT, "over.idx", "overflow");
  unsigned char limit[] = {0, 0, 0x08, 0x02, 0, 0x10, 0, 0, 0, 0x10, 0, 0, 1};
  write_bytes(tmp_path("limit.idx"), limit, sizeof limit);
  CHECK_ERR(st_idx_read(tmp_path("limit.idx"), &t), ST_ERR_FORMAT, "limit.idx", "2^40");
  /* NaN in a float payload */
  float fv[3] = {1.0f, NAN, 2.0f};
  st_tensor tf = {ST_F32, 1, {3}, fv};
  CHECK_OK(st_idx_write(tmp_path("nan.idx"), &tf));
  CHECK_ERR(st_idx_read(tmp_path("nan.idx"), &t), ST_ERR_NONFINITE, "nan.idx", "element 1",
            "offset 12");
  /* corrupt gzip body */
  write_gz(tmp_path("bad.idx.gz"), good, sizeof good);
  FILE *f = fopen(tmp_path("bad.idx.gz"), "r+b");
  if (f) {
    fseek(f, 12, SEEK_SET);
    for (int i = 0; i < 8; i++) fputc(0xA5, f);
    fclose(f);
  }
  st_status s = st_idx_read(tmp_path("bad.idx.gz"), &t);
  CHECK_MSG(s == ST_ERR_FORMAT && has("bad.idx.gz"), "%s", st_last_error());
  if (s == ST_OK) st_tensor_destroy(&t);
  /* writing bad tensors */
  st_tensor rank0t = {ST_U8, 0, {0}, good};
  CHECK_ERR(st_idx_write(tmp_path("w.idx"), &rank0t), ST_ERR_INVALID, "w.idx");
}

/* A header claiming 2^39 bytes in a tiny file fails fast without allocating. */
static void test_idx_forged(void) {
  unsigned char hdr[12 + 64] = {0, 0, 0x08, 0x02, 0x80, 0, 0, 0, 0, 0, 1, 0};
  size_t rss0 = st_peak_rss_bytes();
  double t0 = st_now_seconds();
  st_tensor t;
  write_bytes(tmp_path("huge.idx"), hdr, sizeof hdr);
  CHECK_ERR(st_idx_read(tmp_path("huge.idx"), &t), ST_ERR_FORMAT, "huge.idx", "truncated",
            "549755813888", "offset 12", "offset 76");
  write_gz(tmp_path("huge.idx.gz"), hdr, sizeof hdr);
  CHECK_ERR(st_idx_read(tmp_path("huge.idx.gz"), &t), ST_ERR_FORMAT, "huge.idx.gz",
            "truncated", "549755813888");
  /* the largest header under the limit, in gzip: still only chunk-sized buffers */
  double dt = st_now_seconds() - t0;
  size_t rss1 = st_peak_rss_bytes();
  CHECK_MSG(dt < 1.0, "took %.3f s", dt);
  CHECK_MSG(rss1 - rss0 < ((size_t)64 << 20), "peak RSS grew %zu bytes", rss1 - rss0);
}

static void write_mnist(const char *dir, int ntrain_x, int ntrain_y, bool gz) {
  uint8_t *img = calloc((size_t)ntrain_x * 784, 1);
  uint8_t lab[16] = {0};
  for (int i = 0; i < 16; i++) lab[i] = (uint8_t)(i % 10);
  st_tensor x = {ST_U8, 3, {ntrain_x, 28, 28}, img}, y = {ST_U8, 1, {ntrain_y}, lab};
  char p[512];
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte%s", dir, gz ? ".gz" : "");
  CHECK_OK(st_idx_write(p, &x));
  snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte%s", dir, gz ? ".gz" : "");
  CHECK_OK(st_idx_write(p, &y));
  x.dims[0] = y.dims[0] = 3;
  snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", dir);
  CHECK_OK(st_idx_write(p, &x));
  snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", dir);
  CHECK_OK(st_idx_write(p, &y));
  free(img);
}

static void test_mnist_dir(void) {
  char dir[300];
  snprintf(dir, sizeof dir, "%s/mnist", g_dir);
  CHECK(mkdir_p_ok(dir));
  st_mnist m;
  CHECK_ERR(st_mnist_load(dir, &m), ST_ERR_IO, "train-images-idx3-ubyte", dir);
  write_mnist(dir, 5, 5, true);
  CHECK_OK(st_mnist_load(dir, &m));
  CHECK(m.train_x.dims[0] == 5 && m.test_x.dims[0] == 3 && m.test_y.rank == 1);
  st_mnist_destroy(&m);
  write_mnist(dir, 5, 4, false); /* plain files are preferred over .gz */
  CHECK_ERR(st_mnist_load(dir, &m), ST_ERR_FORMAT, "train-images-idx3-ubyte has 5",
            "train-labels-idx1-ubyte has 4");
  CHECK(m.train_x.data == NULL);
}

/* ---- CSV ---------------------------------------------------------------- */

static void test_csv_good(void) {
  st_tensor x, y;
  write_text(tmp_path("good.csv"), "a,b,label,c\n1,2,0,3\n4,5.5,1,-6e1\n");
  st_csv_options o = st_csv_default_options();
  o.label_name = "label";
  CHECK_OK(st_csv_read(tmp_path("good.csv"), &o, &x, &y));
  CHECK(x.dtype == ST_F32 && x.rank == 2 && x.dims[0] == 2 && x.dims[1] == 3);
  CHECK(y.rank == 1 && y.dims[0] == 2);
  if (x.data && y.data) {
    const float *xv = x.data, *yv = y.data;
    CHECK(xv[0] == 1 && xv[1] == 2 && xv[2] == 3 && xv[3] == 4 && xv[4] == 5.5f &&
          xv[5] == -60);
    CHECK(yv[0] == 0 && yv[1] == 1);
  }
  st_tensor_destroy(&x);
  st_tensor_destroy(&y);
  /* BOM, CRLF, no final newline, default label = last column */
  write_text(tmp_path("crlf.csv"), "\xEF\xBB\xBF" "f1,f2,y\r\n1.5,2,1\r\n\r\n3,4e1,0");
  CHECK_OK(st_csv_read(tmp_path("crlf.csv"), NULL, &x, &y));
  CHECK(x.dims[0] == 2 && x.dims[1] == 2);
  if (x.data && y.data) {
    const float *xv = x.data, *yv = y.data;
    CHECK(xv[0] == 1.5f && xv[3] == 40.0f && yv[0] == 1 && yv[1] == 0);
  }
  st_tensor_destroy(&x);
  st_tensor_destroy(&y);
  /* no header, label column 0, other delimiter */
  write_text(tmp_path("nohdr.csv"), "7;1;2\n8;3;4\n");
  o = st_csv_default_options();
  o.header = false;
  o.label_column = 0;
  o.delimiter = ';';
  CHECK_OK(st_csv_read(tmp_path("nohdr.csv"), &o, &x, &y));
  CHECK(x.dims[0] == 2 && x.dims[1] == 2 && y.data && ((float *)y.data)[1] == 8);
  st_tensor_destroy(&x);
  st_tensor_destroy(&y);
  o = st_csv_default_options();
  o.label_name = "nope";
  CHECK_ERR(st_csv_read(tmp_path("good.csv"), &o, &x, &y), ST_ERR_INVALID, "good.csv", "nope");
}

static void test_csv_bad(void) {
  st_tensor x, y;
  struct {
    const char *name, *text;
    st_status want;
    const char *m1, *m2;
  } cases[] = {
      {"ragged.csv", "a,b,c\n1,2,3\n4,5\n", ST_ERR_FORMAT, "row 3 has 2 columns", "expected 3"},
      {"nonnum.csv", "a,b\n1,2\n3,abc\n", ST_ERR_FORMAT, "row 3, column 2 ('abc')",
       "not a number"},
      {"partial.csv", "a,b\n1,2x\n", ST_ERR_FORMAT, "row 2, column 2 ('2x')", "not a number"},
      {"emptycell.csv", "a,b\n,2\n", ST_ERR_FORMAT, "row 2, column 1", "not a number"},
      {"nan.csv", "a,b\n1,2\nnan,3\n", ST_ERR_NONFINITE, "row 3, column 1", "nan"},
      {"inf.csv", "a,b\n1,-inf\n", ST_ERR_NONFINITE, "row 2, column 2", "not finite"},
      {"range.csv", "a,b\n1,1e999\n", ST_ERR_FORMAT, "row 2, column 2", "range"},
      {"empty.csv", "", ST_ERR_FORMAT, "empty", "empty.csv"},
      {"blank.csv", "\n\r\n", ST_ERR_FORMAT, "empty", "blank.csv"},
      {"hdronly.csv", "a,b\n", ST_ERR_FORMAT, "no data rows", "hdronly.csv"},
      {"onecol.csv", "a\n1\n", ST_ERR_FORMAT, "row 1", "at least 2"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_text(tmp_path(cases[i].name), cases[i].text);
    CHECK_ERR(st_csv_read(tmp_path(cases[i].name), NULL, &x, &y), cases[i].want,
              cases[i].name, cases[i].m1, cases[i].m2);
    CHECK(x.data == NULL && y.data == NULL);
  }
  write_bytes(tmp_path("nul.csv"), "a,b\n1,2\n3,\0\n", 12);
  CHECK_ERR(st_csv_read(tmp_path("nul.csv"), NULL, &x, &y), ST_ERR_FORMAT, "nul.csv", "NUL",
            "row 3");
  CHECK_ERR(st_csv_read(tmp_path("missing.csv"), NULL, &x, &y), ST_ERR_IO, "missing.csv");
  /* a 1 MB field */
  size_t big = (size_t)1 << 20;
  char *txt = malloc(big + 16);
  memcpy(txt, "a,b\n1,", 6);
  memset(txt + 6, '1', big);
  memcpy(txt + 6 + big, "\n", 2);
  write_text(tmp_path("bigfield.csv"), txt);
  CHECK_ERR(st_csv_read(tmp_path("bigfield.csv"), NULL, &x, &y), ST_ERR_FORMAT,
            "row 2, column 2", "limit");
  free(txt);
  /* 10^6 columns */
  size_t cols = 1000000;
  txt = malloc(2 * cols + 2);
  for (size_t i = 0; i < cols; i++) txt[2 * i] = '1', txt[2 * i + 1] = ',';
  txt[2 * cols - 1] = '\n';
  txt[2 * cols] = '\0';
  write_text(tmp_path("wide.csv"), txt);
  CHECK_ERR(st_csv_read(tmp_path("wide.csv"), NULL, &x, &y), ST_ERR_FORMAT, "row 1",
            "more than 100000 columns");
  free(txt);
}

/* ---- Fashion-MNIST (when installed) ------------------------------------- */

static double time_epoch(st_dataset *ds, int64_t *examples) {
  double t0 = st_now_seconds();
  st_iterator *it = NULL;
  *examples = 0;
  CHECK_OK(st_dataset_iterate(ds, &it));
  for (;;) {
    st_batch b;
    bool end = false;
    st_status s = st_iterator_next(it, &b, &end);
    CHECK_OK(s);
    if (s != ST_OK || end) break;
    *examples += b.size;
  }
  st_iterator_destroy(it);
  return st_now_seconds() - t0;
}

static void test_fashion_mnist(void) {
  const char *dir = "/usr/share/datasets/fashion-mnist";
  if (access(dir, R_OK) != 0) {
    fprintf(stderr, "note: %s absent; Fashion-MNIST checks skipped\n", dir);
    return;
  }
  st_mnist m;
  double t0 = st_now_seconds();
  CHECK_OK(st_mnist_load(dir, &m));
  fprintf(stderr, "fashion-mnist: loaded in %.3f s\n", st_now_seconds() - t0);
  CHECK(m.train_x.dims[0] == 60000 && m.train_x.dims[1] == 28 && m.train_x.dims[2] == 28);
  CHECK(m.test_x.dims[0] == 10000 && m.test_y.dims[0] == 10000);
  bool labels_ok = m.train_y.data && m.test_y.data;
  for (int64_t i = 0; labels_ok && i < 60000; i++) labels_ok = ((uint8_t *)m.train_y.data)[i] < 10;
  for (int64_t i = 0; labels_ok && i < 10000; i++) labels_ok = ((uint8_t *)m.test_y.data)[i] < 10;
  CHECK(labels_ok);
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&m.train_x, &m.train_y, 1.0f / 255, false, &ds));
  ds = t_batch(t_shuffle(ds, 60000, 1, true), 128, false);
  CHECK_EQ(st_dataset_cardinality(ds), 469);
  int64_t n = 0;
  double best = 1e9;
  for (int e = 0; e < 3; e++) {
    double dt = time_epoch(ds, &n);
    best = dt < best ? dt : best;
    CHECK(n == 60000);
  }
  fprintf(stderr, "fashion-mnist: shuffled epoch of 469 batches of 128 in %.1f ms (best of 3)\n",
          best * 1e3);
  ds = t_prefetch(ds, 2);
  double dt = time_epoch(ds, &n);
  CHECK(n == 60000);
  fprintf(stderr, "fashion-mnist: same with prefetch(2): %.1f ms\n", dt * 1e3);
  st_dataset_destroy(ds);
  st_mnist_destroy(&m);
}

static const check_case cases[] = {
    CHECK_CASE(test_tensor_basics), CHECK_CASE(test_slices),    CHECK_CASE(test_shuffle),
    CHECK_CASE(test_shuffle_paths), CHECK_CASE(test_batch),     CHECK_CASE(test_counts),
    CHECK_CASE(test_shard),         CHECK_CASE(test_map),       CHECK_CASE(test_prefetch),
    CHECK_CASE(test_idx_forged),    CHECK_CASE(test_idx_roundtrip), CHECK_CASE(test_idx_bad),
    CHECK_CASE(test_mnist_dir),     CHECK_CASE(test_csv_good),  CHECK_CASE(test_csv_bad),
    CHECK_CASE(test_fashion_mnist)};

int main(int argc, char **argv) {
  if (!tmpdir_make("strata_test_data")) return 1;
  int rc = CHECK_MAIN(argc, argv, cases);
  rm_tree(g_dir);
  return rc;
}
