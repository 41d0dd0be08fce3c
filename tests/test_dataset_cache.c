/* Tests of st_dataset_cache (issue 18 item 3): the first complete pass writes
 * the file (nothing before its end; a pass cut short or failing leaves no
 * file and no temp file), later passes and later datasets read it without
 * running upstream and give the same bytes, batches included; a damaged,
 * truncated, foreign or mismatched file is an error naming it. Files live in
 * a mkdtemp directory removed at the end. */
#define _POSIX_C_SOURCE 200809L
#include "strata/data.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tmpdir.h"

typedef struct counter {
  int calls, fail_at;
} counter;

/* Counts the elements upstream produces; fails at label fail_at (if >= 0). */
static st_status count_fn(void *user, float *x, size_t xs, float *y, size_t ys) {
  (void)x, (void)xs, (void)ys;
  counter *c = user;
  if (c->fail_at >= 0 && y[0] == (float)c->fail_at) return st_error(ST_ERR_INVALID, "boom");
  c->calls++;
  return ST_OK;
}

/* n examples of 4 floats (offset by base) and a label, counted by c,
 * shuffled by seed (0 = not), optionally batched, then cached in name. */
static st_dataset *pipeline(int n, float base, counter *c, uint64_t seed, int batch,
                            const char *name) {
  st_tensor x = {ST_F32, 2, {n, 4}, malloc((size_t)n * 4 * sizeof(float))};
  st_tensor y = {ST_F32, 1, {n}, malloc((size_t)n * sizeof(float))};
  for (int i = 0; i < n * 4; i++) ((float *)x.data)[i] = base + (float)i * 0.5f;
  for (int i = 0; i < n; i++) ((float *)y.data)[i] = (float)i;
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &y, 1.0f, true, &ds));
  st_tensor_destroy(&x);
  st_tensor_destroy(&y);
  CHECK_OK(st_dataset_map(ds, count_fn, c, &ds));
  if (seed) CHECK_OK(st_dataset_shuffle(ds, n, seed, true, &ds));
  if (batch) CHECK_OK(st_dataset_batch(ds, batch, false, &ds));
  CHECK_OK(st_dataset_cache(ds, tmp_path(name), &ds));
  return ds;
}

/* One pass: x then y floats of every item into out; returns floats. */
static size_t pass(st_dataset *ds, float *out, size_t cap, st_status *s, char *msg) {
  st_iterator *it = NULL;
  size_t n = 0;
  *s = st_dataset_iterate(ds, &it);
  while (*s == ST_OK) {
    st_batch b;
    bool end;
    if ((*s = st_iterator_next(it, &b, &end)) != ST_OK || end) break;
    for (int k = 0; k < b.size && n + 5 <= cap; k++, n += 5) {
      memcpy(out + n, b.x + 4 * k, 4 * sizeof(float));
      out[n + 4] = b.y[k];
    }
  }
  if (*s != ST_OK && msg) snprintf(msg, 512, "%s", st_last_error());
  st_iterator_destroy(it);
  return n;
}

static bool exists(const char *name) { return access(tmp_path(name), F_OK) == 0; }

/* Entries of the directory whose name contains ".tmp." (temp files). */
static int temp_files(void) {
  DIR *d = opendir(g_dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, ".tmp.") || strstr(e->d_name, ".st-tmp-")) n++;
  if (d) closedir(d);
  return n;
}

#define CAP 4096

static void test_write_then_read(void) {
  static float a[CAP], b[CAP];
  counter c = {0, -1};
  st_dataset *ds = pipeline(37, 0.0f, &c, 9, 0, "c1.cache");
  /* a pass cut short writes nothing */
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  st_batch bt;
  bool end;
  for (int i = 0; i < 5; i++) CHECK_OK(st_iterator_next(it, &bt, &end));
  CHECK(!exists("c1.cache"));
  CHECK_EQ(temp_files(), 1);
  st_iterator_destroy(it);
  CHECK(!exists("c1.cache"));
  CHECK_EQ(temp_files(), 0);
  /* a complete pass writes it; the next ones read it, upstream idle */
  st_status s;
  c.calls = 0;
  size_t na = pass(ds, a, CAP, &s, NULL);
  CHECK_OK(s);
  CHECK_EQ(na, (size_t)37 * 5);
  CHECK_EQ(c.calls, 37);
  CHECK(exists("c1.cache"));
  CHECK_EQ(temp_files(), 0);
  for (int p = 0; p < 2; p++) {
    size_t nb = pass(ds, b, CAP, &s, NULL);
    CHECK_OK(s);
    CHECK_EQ(nb, na);
    CHECK(memcmp(a, b, na * sizeof(float)) == 0); /* the shuffle of the first pass, frozen */
  }
  CHECK_EQ(c.calls, 37);
  st_dataset_destroy(ds);
  /* a later "run": another pipeline of the same shapes reads the file */
  counter c2 = {0, -1};
  ds = pipeline(37, 100.0f, &c2, 0, 0, "c1.cache");
  size_t nb = pass(ds, b, CAP, &s, NULL);
  CHECK_OK(s);
  CHECK_EQ(nb, na);
  CHECK(memcmp(a, b, na * sizeof(float)) == 0);
  CHECK_EQ(c2.calls, 0);
  st_dataset_destroy(ds);
}

static void test_batches(void) {
  static float a[CAP], b[CAP];
  counter c = {0, -1};
  st_dataset *ds = pipeline(23, 1.0f, &c, 0, 5, "c2.cache"); /* 4 batches of 5 and one of 3 */
  st_status s;
  size_t na = pass(ds, a, CAP, &s, NULL);
  CHECK_OK(s);
  size_t nb = pass(ds, b, CAP, &s, NULL);
  CHECK_OK(s);
  CHECK_EQ(na, (size_t)23 * 5);
  CHECK_EQ(nb, na);
  CHECK(memcmp(a, b, na * sizeof(float)) == 0);
  CHECK_EQ(c.calls, 23);
  st_dataset_destroy(ds);
  /* the same file under an unbatched pipeline: refused, naming it */
  counter c2 = {0, -1};
  ds = pipeline(23, 1.0f, &c2, 0, 0, "c2.cache");
  char msg[512] = "";
  pass(ds, b, CAP, &s, msg);
  CHECK_EQ(s, ST_ERR_FORMAT);
  CHECK(strstr(msg, "c2.cache: written by another pipeline") != NULL);
  /* both sides, which differ (issue 29 D18: the message printed the same figures twice) */
  CHECK(strstr(msg, "batch 5 per item; this one: x [") != NULL && strstr(msg, "batch 0 per item)") != NULL);
  st_dataset_destroy(ds);
}

static void test_failed_pass(void) {
  static float a[CAP];
  counter c = {0, 11};
  st_dataset *ds = pipeline(30, 0.0f, &c, 0, 0, "c3.cache");
  st_status s;
  char msg[512] = "";
  size_t n = pass(ds, a, CAP, &s, msg);
  CHECK_EQ(s, ST_ERR_INVALID);
  CHECK_EQ(n, (size_t)11 * 5);
  CHECK(!exists("c3.cache"));
  CHECK_EQ(temp_files(), 0);
  st_dataset_destroy(ds);
}

static void corrupt(const char *name, long off, int truncate_to) {
  if (truncate_to >= 0) {
    CHECK_EQ(truncate(tmp_path(name), truncate_to), 0);
    return;
  }
  FILE *f = fopen(tmp_path(name), "r+b");
  CHECK(f != NULL);
  if (!f) return;
  fseek(f, off, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, off, SEEK_SET);
  fputc(ch ^ 1, f);
  fclose(f);
}

/* Damage: the error names the file (and the offset of the bad item). */
static void test_damaged(void) {
  static float a[CAP];
  const struct {
    long off;
    int trunc;
    const char *want;
  } cases[] = {
      {64 + 8 + 3, -1, "offset 64: item CRC mismatch"},
      {64 + 2 * 28 + 9, -1, "offset 120: item CRC mismatch"},
      {64 + 2, -1, "offset 64: item size out of range"},
      {20, -1, "offset 0: header CRC mismatch"},
      {0, 64 + 28 + 10, "offset 92: truncated item"},
      {0, 64 + 10 * 28, "offset 344: truncated before the end mark"},
      {1, -1, "not a Strata dataset cache"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    unlink(tmp_path("c4.cache"));
    counter c = {0, -1};
    st_dataset *ds = pipeline(10, 0.0f, &c, 0, 0, "c4.cache"); /* items: 8 + 5 * 4 bytes */
    st_status s;
    CHECK_EQ(pass(ds, a, CAP, &s, NULL), (size_t)50);
    CHECK_OK(s);
    corrupt("c4.cache", cases[k].off, cases[k].trunc);
    char msg[512] = "";
    pass(ds, a, CAP, &s, msg);
    CHECK_EQ(s, ST_ERR_FORMAT);
    CHECK(strstr(msg, "c4.cache") != NULL);
    if (!strstr(msg, cases[k].want)) fprintf(stderr, "case %zu: %s\n", k, msg);
    CHECK(strstr(msg, cases[k].want) != NULL);
    st_dataset_destroy(ds);
  }
}

static void test_bad_arguments(void) {
  st_tensor x = {ST_F32, 2, {3, 1}, (float[]){1, 2, 3}};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, NULL, 1.0f, true, &ds));
  CHECK_EQ(st_dataset_cache(ds, "", &ds), ST_ERR_INVALID);
  CHECK(ds == NULL);
  CHECK_OK(st_dataset_from_tensor_slices(&x, NULL, 1.0f, true, &ds));
  CHECK_OK(st_dataset_repeat(ds, -1, &ds));
  CHECK_EQ(st_dataset_cache(ds, tmp_path("inf.cache"), &ds), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "infinite") != NULL);
}

int main(int argc, char **argv) {
  if (!tmpdir_make("strata_cache")) return 1;
  static const check_case cases[] = {
      CHECK_CASE(test_write_then_read), CHECK_CASE(test_batches),
      CHECK_CASE(test_failed_pass),     CHECK_CASE(test_damaged),
      CHECK_CASE(test_bad_arguments),
  };
  int rc = CHECK_MAIN(argc, argv, cases);
  tmpdir_remove();
  return rc;
}
