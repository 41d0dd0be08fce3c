/* Tests of token shards (llm.c's .bin format) and their dataset (issue 31
 * part 3): the writer's bytes (header, little-endian uint16 / uint32 tokens),
 * windows read back in llm.c's order (row b of batch k = tokens [k*B*T +
 * b*T, ... + T], targets shifted by one), the shuffle (every window once per
 * epoch, deterministic from seed and epoch), FILE sharding by hand and by
 * auto-shard (disjoint files covering all), and each malformed input as an
 * error naming the file, the byte offset and the value. */
#define _POSIX_C_SOURCE 200809L
#include "strata/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data/autoshard.h"
#include "tmpdir.h"

/* A shard of n tokens, token i = (base + i * step) % mod. */
static void write_shard(const char *path, bool u32, int64_t n, uint32_t base, uint32_t step,
                        uint32_t mod) {
  st_token_writer *w = NULL;
  CHECK_OK(st_token_writer_create(path, u32, &w));
  for (int64_t i = 0; i < n; i++) {
    uint32_t t = (uint32_t)((base + (uint64_t)i * step) % mod);
    CHECK_OK(st_token_writer_write(w, &t, 1));
  }
  CHECK_EQ(st_token_writer_count(w), n);
  CHECK_OK(st_token_writer_close(w));
}

static size_t read_bytes(const char *path, unsigned char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

static void put_bytes(const char *path, const unsigned char *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK_EQ(fwrite(buf, 1, n, f), n);
  fclose(f);
}

static int32_t le32(const unsigned char *p) {
  return (int32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
}

static void test_writer_bytes(void) {
  const char *p16 = tmp_path("w16.bin"), *p32 = tmp_path("w32.bin");
  uint32_t toks[3] = {1, 0x1234, 65535};
  st_token_writer *w = NULL;
  CHECK_OK(st_token_writer_create(p16, false, &w));
  CHECK_OK(st_token_writer_write(w, toks, 3));
  CHECK_OK(st_token_writer_close(w));
  static unsigned char b[4096];
  CHECK_EQ(read_bytes(p16, b, sizeof b), (size_t)1024 + 6);
  CHECK_EQ(le32(b), 20240520);
  CHECK_EQ(le32(b + 4), 1);
  CHECK_EQ(le32(b + 8), 3);
  CHECK_EQ(le32(b + 12), 0);
  CHECK_EQ(b[1024 + 2], 0x34);
  CHECK_EQ(b[1024 + 3], 0x12);
  toks[2] = 70000;
  CHECK_OK(st_token_writer_create(p32, true, &w));
  CHECK_OK(st_token_writer_write(w, toks, 3));
  CHECK_OK(st_token_writer_close(w));
  CHECK_EQ(read_bytes(p32, b, sizeof b), (size_t)1024 + 12);
  CHECK_EQ(le32(b), 20240801);
  CHECK_EQ(le32(b + 4), 7);
  CHECK_EQ(le32(b + 1024 + 8), 70000);
  /* a token that does not fit uint16: refused, naming file and token; abandoned: no file */
  CHECK_OK(st_token_writer_create(tmp_path("big.bin"), false, &w));
  CHECK_EQ(st_token_writer_write(w, toks, 3), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "big.bin") && strstr(st_last_error(), "token 70000"));
  st_token_writer_destroy(w);
  CHECK(access(tmp_path("big.bin"), F_OK) != 0);
  st_token_writer_destroy(NULL);
  CHECK_EQ(st_token_writer_count(NULL), 0);
}

/* Unshuffled, batched: llm.c's order, for uint16 and uint32 shards. */
static void test_llmc_order(void) {
  for (int u32 = 0; u32 < 2; u32++) {
    const char *p = tmp_path(u32 ? "o32.bin" : "o16.bin");
    int64_t n = 1000;
    write_shard(p, u32, n, 7, 13, u32 ? 100003 : 50257);
    const int T = 8, B = 4;
    st_token_dataset_options o = st_token_dataset_default_options();
    o.seq_len = T;
    o.shuffle = false;
    st_dataset *ds = NULL;
    const char *files[] = {p};
    CHECK_OK(st_dataset_from_token_files(files, 1, &o, &ds));
    CHECK_EQ(st_dataset_cardinality(ds), (n - 1) / T);
    CHECK_EQ(st_dataset_token_count(ds), n);
    CHECK_EQ(st_dataset_x_shape(ds).dims[0], T);
    CHECK_EQ(st_dataset_y_size(ds), (size_t)T);
    CHECK_OK(st_dataset_batch(ds, B, true, &ds));
    st_iterator *it = NULL;
    CHECK_OK(st_dataset_iterate(ds, &it));
    st_batch bt;
    bool end = false;
    int k = 0, bad = 0;
    while (st_iterator_next(it, &bt, &end) == ST_OK && !end) {
      for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
          int64_t at = (int64_t)k * B * T + b * T + i;
          uint32_t mod = u32 ? 100003 : 50257;
          bad += bt.x[b * T + i] != (float)((7 + at * 13) % mod);
          bad += bt.y[b * T + i] != (float)((7 + (at + 1) * 13) % mod);
        }
      k++;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(k, (int)((n - 1) / T / B));
    st_iterator_destroy(it);
    st_dataset_destroy(ds);
  }
}

/* The first token of each window of one pass (windows identified by it). */
static int pass_starts(st_dataset *ds, uint64_t epoch, float *starts, int cap) {
  st_iterator *it = NULL;
  if (st_dataset_iterate_epoch(ds, epoch, &it) != ST_OK) return -1;
  st_batch b;
  bool end = false;
  int n = 0;
  while (st_iterator_next(it, &b, &end) == ST_OK && !end && n < cap) starts[n++] = b.x[0];
  st_iterator_destroy(it);
  return n;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static void test_shuffle(void) {
  const char *p = tmp_path("shuf.bin");
  write_shard(p, true, 4 * 997 + 1, 0, 1, 1u << 24); /* token i = i: window w starts at 4w */
  st_token_dataset_options o = st_token_dataset_default_options();
  o.seq_len = 4;
  o.seed = 5;
  const char *files[] = {p};
  st_dataset *ds = NULL, *ds2 = NULL;
  CHECK_OK(st_dataset_from_token_files(files, 1, &o, &ds));
  o.seed = 6;
  CHECK_OK(st_dataset_from_token_files(files, 1, &o, &ds2));
  static float a[1000], b[1000], c[1000], d[1000];
  CHECK_EQ(pass_starts(ds, 0, a, 1000), 997);
  CHECK_EQ(pass_starts(ds, 0, b, 1000), 997);
  CHECK(memcmp(a, b, sizeof(float) * 997) == 0); /* deterministic */
  CHECK_EQ(pass_starts(ds, 1, c, 1000), 997);
  CHECK(memcmp(a, c, sizeof(float) * 997) != 0); /* another epoch, another order */
  CHECK_EQ(pass_starts(ds2, 0, d, 1000), 997);
  CHECK(memcmp(a, d, sizeof(float) * 997) != 0); /* another seed */
  int in_order = 0;
  for (int i = 0; i < 997; i++) in_order += a[i] == (float)(4 * i);
  CHECK_LT(in_order, 20);
  qsort(a, 997, sizeof *a, cmp_float);
  int bad = 0;
  for (int i = 0; i < 997; i++) bad += a[i] != (float)(4 * i); /* each window once */
  CHECK_EQ(bad, 0);
  /* skip (take/skip over the source) gives the same windows as reading them */
  CHECK_OK(st_dataset_skip(ds, 990, &ds));
  CHECK_EQ(pass_starts(ds, 0, c, 1000), 7);
  CHECK(memcmp(c, b + 990, sizeof(float) * 7) == 0);
  st_dataset_destroy(ds);
  st_dataset_destroy(ds2);
}

/* 5 files, file f holding tokens f*1000 + i: which files a dataset reads. */
static unsigned files_read(st_dataset *ds) {
  st_iterator *it = NULL;
  unsigned mask = 0;
  if (st_dataset_iterate(ds, &it) != ST_OK) return 0;
  st_batch b;
  bool end = false;
  while (st_iterator_next(it, &b, &end) == ST_OK && !end)
    for (int i = 0; i < b.size; i++) mask |= 1u << (int)(b.x[i * 4] / 1000);
  st_iterator_destroy(it);
  return mask;
}

static void test_file_shards(void) {
  char names[5][64];
  const char *files[5];
  for (int f = 0; f < 5; f++) {
    snprintf(names[f], sizeof names[f], "%s", tmp_path(""));
    snprintf(names[f] + strlen(names[f]), 20, "part%d.bin", f);
    files[f] = names[f];
    write_shard(files[f], false, 41 + f * 4, (uint32_t)f * 1000, 1, 65536);
  }
  st_token_dataset_options o = st_token_dataset_default_options();
  o.seq_len = 4;
  unsigned masks[2];
  int64_t windows = 0;
  for (int r = 0; r < 2; r++) {
    o.num_shards = 2;
    o.shard_index = r;
    st_dataset *ds = NULL;
    CHECK_OK(st_dataset_from_token_files(files, 5, &o, &ds));
    CHECK_EQ(st_dataset_token_file_count(ds), r == 0 ? 3 : 2);
    windows += st_dataset_cardinality(ds);
    masks[r] = files_read(ds);
    st_dataset_destroy(ds);
  }
  CHECK_EQ(masks[0], 0x15u); /* files 0, 2, 4 */
  CHECK_EQ(masks[1], 0x0au); /* files 1, 3 */
  CHECK_EQ(windows, 10 + 11 + 12 + 13 + 14);
  /* auto-shard AUTO: the pipeline rebuilt over each worker's files, batch halved */
  o.num_shards = 1;
  o.shard_index = 0;
  st_dataset *all = NULL;
  CHECK_OK(st_dataset_from_token_files(files, 5, &o, &all));
  CHECK_OK(st_dataset_batch(all, 8, false, &all));
  for (int r = 0; r < 2; r++) {
    st_dataset *mine = NULL;
    char why[256];
    CHECK_OK(st__ds_auto_shard_files(all, 2, r, &mine, why, sizeof why));
    CHECK(mine != NULL);
    if (!mine) continue;
    CHECK_EQ(st_dataset_batch_size(mine), 4);
    CHECK_EQ(files_read(mine), masks[r]);
    st_dataset_destroy(mine);
  }
  /* fewer files than workers: DATA, saying why */
  st_dataset *mine = NULL;
  char why[256];
  CHECK_OK(st__ds_auto_shard_files(all, 6, 0, &mine, why, sizeof why));
  CHECK(mine == NULL && strstr(why, "5 files for 6 workers"));
  st_dataset_destroy(all);
  o.num_shards = 6;
  CHECK_EQ(st_dataset_from_token_files(files, 5, &o, &all), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "at least 6 files, got 5"));
}

/* A good 200-token uint16 shard's bytes, then damaged by fn. */
static size_t good_bytes(unsigned char *b) {
  memset(b, 0, 1024 + 400);
  int32_t h[3] = {20240520, 1, 200};
  memcpy(b, h, sizeof h);
  for (int i = 0; i < 200; i++) b[1024 + 2 * i] = (unsigned char)(i % 50);
  return 1024 + 400;
}

/* Opening the bytes b (n) refused with status s and a message naming the
 * file and each of the needles. */
static void refused(const char *name, const unsigned char *b, size_t n, int64_t vocab, int T,
                    st_status want, const char *n1, const char *n2) {
  const char *p = tmp_path(name);
  put_bytes(p, b, n);
  st_token_dataset_options o = st_token_dataset_default_options();
  o.vocab = vocab;
  o.seq_len = T;
  st_dataset *ds = NULL;
  const char *files[] = {p};
  st_status s = st_dataset_from_token_files(files, 1, &o, &ds);
  const char *e = st_last_error();
  if (want == ST_OK) {
    CHECK_MSG(s == ST_OK && ds != NULL, "%s: status %d: %s", name, (int)s, e);
    st_dataset_destroy(ds);
    return;
  }
  CHECK_MSG(s == want && ds == NULL, "%s: status %d: %s", name, (int)s, e);
  CHECK_MSG(strstr(e, p) && strstr(e, n1) && (!n2 || strstr(e, n2)), "%s: %s", name, e);
}

static void test_malformed(void) {
  static unsigned char b[4096];
  size_t n = good_bytes(b);
  refused("ok.bin", b, n, 0, 8, ST_OK, NULL, NULL); /* the baseline opens */
  b[0] ^= 1;
  refused("magic.bin", b, n, 0, 8, ST_ERR_FORMAT, "offset 0", "magic 20240521");
  n = good_bytes(b);
  b[4] = 2;
  refused("version.bin", b, n, 0, 8, ST_ERR_FORMAT, "offset 4", "version 2");
  refused("header.bin", b, 600, 0, 8, ST_ERR_FORMAT, "600 bytes", "1024-byte header");
  n = good_bytes(b);
  refused("truncated.bin", b, n - 3, 0, 8, ST_ERR_FORMAT, "offset 8", "token count 200 needs 400 bytes");
  int32_t big = 300;
  memcpy(b + 8, &big, 4);
  refused("beyond.bin", b, n, 0, 8, ST_ERR_FORMAT, "offset 8", "token count 300");
  big = -5;
  memcpy(b + 8, &big, 4);
  refused("negative.bin", b, n, 0, 8, ST_ERR_FORMAT, "offset 8", "token count -5");
  big = 150;
  memcpy(b + 8, &big, 4);
  refused("trailing.bin", b, n, 0, 8, ST_ERR_FORMAT, "offset 1324", "100 bytes past");
  n = good_bytes(b);
  b[1024 + 2 * 123] = 77;
  refused("vocab.bin", b, n, 60, 8, ST_ERR_FORMAT, "offset 1270", "token 77 (token 123");
  refused("vocab_ok.bin", b, n, 78, 8, ST_OK, NULL, NULL);
  n = good_bytes(b);
  refused("short.bin", b, n, 0, 200, ST_ERR_FORMAT, "200 tokens", "seq_len + 1 = 201");
  refused("fits.bin", b, n, 0, 199, ST_OK, NULL, NULL);
  /* uint32 shard: an id a float cannot hold exactly */
  int32_t h[3] = {20240801, 7, 100};
  memset(b, 0, 1024 + 400);
  memcpy(b, h, sizeof h);
  uint32_t huge = 1u << 24;
  memcpy(b + 1024 + 4 * 9, &huge, 4);
  refused("u32.bin", b, 1024 + 400, 0, 8, ST_ERR_FORMAT, "offset 1060", "token 16777216");
  /* a missing file: ST_ERR_IO "cannot open" */
  st_dataset *ds = NULL;
  const char *missing[] = {tmp_path("missing.bin")};
  CHECK_EQ(st_dataset_from_token_files(missing, 1, NULL, &ds), ST_ERR_IO);
  CHECK(strstr(st_last_error(), "missing.bin: cannot open"));
}

static void test_misuse(void) {
  st_dataset *ds = NULL;
  const char *files[] = {tmp_path("w16.bin")};
  st_token_dataset_options o = st_token_dataset_default_options();
  o.seq_len = 0;
  CHECK_EQ(st_dataset_from_token_files(files, 1, &o, &ds), ST_ERR_INVALID);
  CHECK_EQ(st_dataset_from_token_files(files, 0, NULL, &ds), ST_ERR_INVALID);
  CHECK_EQ(st_dataset_from_token_files(NULL, 1, NULL, &ds), ST_ERR_INVALID);
  CHECK_EQ(st_dataset_token_count(NULL), 0);
  CHECK_EQ(st_dataset_token_file_count(NULL), 0);
  CHECK_EQ(st_token_writer_close(NULL), ST_ERR_INVALID);
}

int main(int argc, char **argv) {
  if (!tmpdir_make("strata_tokens")) return 1;
  static const check_case cases[] = {
      CHECK_CASE(test_writer_bytes), CHECK_CASE(test_llmc_order),
      CHECK_CASE(test_shuffle),      CHECK_CASE(test_file_shards),
      CHECK_CASE(test_malformed),    CHECK_CASE(test_misuse),
  };
  int rc = CHECK_MAIN(argc, argv, cases);
  tmpdir_remove();
  return rc;
}
