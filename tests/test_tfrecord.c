/* Tests of TFRecord files and tf.train.Example (issue 18): framing round
 * trips plain and GZIP against TensorFlow's known bytes, every kind of damage
 * (truncation, bit flips in length / CRCs / payload, a gigabyte length field)
 * as an error naming file and offset or as skipped and counted, Example
 * parsing and its spec errors, the dataset source (order, interleave, FILE
 * sharding with no example twice, pipelines over it), list_files. Files live
 * in a mkdtemp directory removed at the end. */
#define _POSIX_C_SOURCE 200809L
#include "strata/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tmpdir.h"


static size_t file_bytes(const char *path, unsigned char *buf, size_t cap) {
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

/* n records "rec<i>" of i+4 bytes. */
static void write_records(const char *path, st_compression c, int n) {
  st_tfrecord_options o = st_tfrecord_default_options();
  o.compression = c;
  st_tfrecord_writer *w = NULL;
  CHECK_OK(st_tfrecord_writer_create(path, &o, &w));
  for (int i = 0; i < n; i++) {
    char rec[512];
    snprintf(rec, sizeof rec, "rec%d", i);
    size_t len = (size_t)i + 4;
    memset(rec + strlen(rec), '.', len > strlen(rec) ? len - strlen(rec) : 0);
    CHECK_OK(st_tfrecord_writer_write(w, rec, len));
  }
  CHECK_OK(st_tfrecord_writer_close(w));
}

/* Reads every record; returns how many (or -1 on an error, message kept). */
static int read_all(const char *path, const st_tfrecord_options *o, int64_t *skipped) {
  st_tfrecord_reader *r = NULL;
  if (st_tfrecord_reader_create(path, o, &r) != ST_OK) return -1;
  int n = 0;
  for (;;) {
    const void *d;
    size_t len;
    bool end;
    if (st_tfrecord_reader_next(r, &d, &len, &end) != ST_OK) {
      n = -1;
      break;
    }
    if (end) break;
    char want[64];
    snprintf(want, sizeof want, "rec%d", n);
    if (len < strlen(want) || memcmp(d, want, strlen(want)) != 0) {
      n = -2;
      break;
    }
    n++;
  }
  if (skipped) *skipped = st_tfrecord_reader_skipped(r);
  st_tfrecord_reader_destroy(r);
  return n;
}

/* The bytes TensorFlow writes for one record "hello" (tf.io.TFRecordWriter):
 * length 5, masked CRCs from the definition in the TFRecord docs. */
static void test_framing_known_bytes(void) {
  const char *p = tmp_path("hello.tfrecord");
  st_tfrecord_writer *w = NULL;
  CHECK_OK(st_tfrecord_writer_create(p, NULL, &w));
  CHECK_OK(st_tfrecord_writer_write(w, "hello", 5));
  CHECK_OK(st_tfrecord_writer_close(w));
  unsigned char b[64];
  CHECK_EQ(file_bytes(p, b, sizeof b), (size_t)21);
  CHECK_EQ(b[0], 5);
  for (int i = 1; i < 8; i++) CHECK_EQ(b[i], 0);
  uint32_t lcrc = st_crc32c_mask(st_crc32c(0, b, 8));
  CHECK_EQ((uint32_t)(b[8] | b[9] << 8 | b[10] << 16 | (uint32_t)b[11] << 24), lcrc);
  CHECK(memcmp(b + 12, "hello", 5) == 0);
  uint32_t pcrc = st_crc32c_mask(st_crc32c(0, "hello", 5));
  CHECK_EQ((uint32_t)(b[17] | b[18] << 8 | b[19] << 16 | (uint32_t)b[20] << 24), pcrc);
  /* the CRC-32C check value and TensorFlow's mask formula */
  CHECK_EQ(st_crc32c(0, "123456789", 9), 0xE3069283u);
  CHECK_EQ(st_crc32c_mask(0), 0xa282ead8u);
}

static void test_round_trip(void) {
  for (int c = 0; c < ST_COMPRESSION_COUNT; c++) {
    const char *p = tmp_path(c ? "rt.tfrecord.gz" : "rt.tfrecord");
    write_records(p, (st_compression)c, 300);
    st_tfrecord_options o = st_tfrecord_default_options();
    o.compression = (st_compression)c;
    o.buffer_size = 100; /* records straddle buffer refills */
    int64_t sk = -1;
    CHECK_EQ(read_all(p, &o, &sk), 300);
    CHECK_EQ(sk, 0);
  }
  /* a gzip file read as plain fails its first CRC, naming offset 0 */
  st_tfrecord_options o = st_tfrecord_default_options();
  CHECK_EQ(read_all(tmp_path("rt.tfrecord.gz"), &o, NULL), -1);
  CHECK(strstr(st_last_error(), "offset 0:") != NULL);
  st_compression c;
  CHECK_OK(st_compression_parse("GZIP", &c));
  CHECK_EQ((int)c, (int)ST_COMPRESSION_GZIP);
  CHECK_OK(st_compression_parse("", &c));
  CHECK_EQ((int)c, (int)ST_COMPRESSION_NONE);
  CHECK_EQ(st_compression_parse("ZLIB", &c), ST_ERR_INVALID);
}

/* Damage at byte `at` of a 10-record file (record k starts at sum of 16+k+4). */
static int damaged_read(const char *name, size_t at, unsigned char xor_mask, size_t cut,
                        bool skip, int64_t *skipped) {
  const char *good = tmp_path("good.tfrecord");
  write_records(good, ST_COMPRESSION_NONE, 10);
  static unsigned char b[4096];
  size_t n = file_bytes(good, b, sizeof b);
  if (at < n) b[at] ^= xor_mask;
  if (cut) n = cut;
  const char *p = tmp_path(name);
  put_bytes(p, b, n);
  st_tfrecord_options o = st_tfrecord_default_options();
  o.skip_corrupt = skip;
  return read_all(p, &o, skipped);
}

static size_t record_start(int k) {
  size_t off = 0;
  for (int i = 0; i < k; i++) off += 16 + (size_t)i + 4;
  return off;
}

static void test_damage(void) {
  int64_t sk;
  size_t r3 = record_start(3);
  char want[64];
  /* bit flip in the length of record 3 */
  CHECK_EQ(damaged_read("len.tfrecord", r3, 0x10, 0, false, NULL), -1);
  snprintf(want, sizeof want, "len.tfrecord: offset %zu: length field CRC mismatch", r3);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "%s", st_last_error());
  CHECK_EQ(damaged_read("len.tfrecord", r3, 0x10, 0, true, &sk), 3); /* rest of the file lost */
  CHECK_EQ(sk, 1);
  /* bit flip in the length CRC */
  CHECK_EQ(damaged_read("lcrc.tfrecord", r3 + 9, 0x01, 0, false, NULL), -1);
  CHECK(strstr(st_last_error(), "length field CRC mismatch") != NULL);
  /* bit flip in the payload of record 3: skipped alone */
  CHECK_EQ(damaged_read("pay.tfrecord", r3 + 13, 0x40, 0, false, NULL), -1);
  snprintf(want, sizeof want, "pay.tfrecord: offset %zu: payload CRC mismatch", r3);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "%s", st_last_error());
  CHECK_EQ(damaged_read("pay.tfrecord", r3 + 13, 0x40, 0, true, &sk), -2); /* rec4 follows rec2 */
  /* bit flip in the payload CRC of record 0, skipped: records 1.. follow */
  CHECK_EQ(damaged_read("pcrc.tfrecord", 16 + 1, 0x80, 0, false, NULL), -1);
  CHECK(strstr(st_last_error(), "offset 0: payload CRC mismatch") != NULL);
  /* truncated in a payload and in a header */
  CHECK_EQ(damaged_read("cut.tfrecord", 0, 0, record_start(5) + 14, false, NULL), -1);
  snprintf(want, sizeof want, "offset %zu: truncated record", record_start(5));
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "%s", st_last_error());
  CHECK_EQ(damaged_read("cut.tfrecord", 0, 0, record_start(5) + 14, true, &sk), 5);
  CHECK_EQ(sk, 1);
  CHECK_EQ(damaged_read("cuth.tfrecord", 0, 0, record_start(5) + 7, false, NULL), -1);
  CHECK(strstr(st_last_error(), "truncated record header") != NULL);
}

/* A valid header announcing 1 GiB: refused without allocating it, or stepped
 * over (to the end of the file) when skipping. */
static void test_gigabyte_length(void) {
  unsigned char h[12 + 8];
  uint64_t len = 1ull << 30;
  for (int i = 0; i < 8; i++) h[i] = (unsigned char)(len >> (8 * i));
  uint32_t c = st_crc32c_mask(st_crc32c(0, h, 8));
  for (int i = 0; i < 4; i++) h[8 + i] = (unsigned char)(c >> (8 * i));
  memcpy(h + 12, "payload!", 8);
  const char *p = tmp_path("giga.tfrecord");
  put_bytes(p, h, sizeof h);
  st_tfrecord_options o = st_tfrecord_default_options();
  CHECK_EQ(read_all(p, &o, NULL), -1);
  CHECK_MSG(strstr(st_last_error(), "giga.tfrecord: offset 0: record length 1073741824 exceeds "
                   "the limit") != NULL, "%s", st_last_error());
  int64_t sk;
  o.skip_corrupt = true;
  CHECK_EQ(read_all(p, &o, &sk), 0);
  CHECK_EQ(sk, 1);
  /* the same length with a damaged CRC: the CRC check comes first */
  h[8] ^= 1;
  put_bytes(p, h, sizeof h);
  o.skip_corrupt = false;
  CHECK_EQ(read_all(p, &o, NULL), -1);
  CHECK(strstr(st_last_error(), "length field CRC mismatch (length field reads 1073741824") != NULL);
}

/* An Example with image (uint8 [2,2,1]), vec (float32 [3]) and label (int64). */
static void *make_example(uint8_t base, int64_t label, size_t *size) {
  uint8_t px[4] = {base, (uint8_t)(base + 1), 255, 0};
  float v[3] = {0.5f, -1.0f, (float)label};
  st_feature_value f[3] = {{"image", ST_FEATURE_UINT8, px, 4},
                           {"vec", ST_FEATURE_FLOAT32, v, 3},
                           {"label", ST_FEATURE_INT64, &label, 1}};
  void *out = NULL;
  CHECK_OK(st_example_serialize(f, 3, &out, size));
  return out;
}

static st_example_spec image_spec(void) {
  st_example_spec sp;
  memset(&sp, 0, sizeof sp);
  strcpy(sp.x.name, "image");
  sp.x.dtype = ST_FEATURE_UINT8;
  sp.x.shape = (st_shape){3, {2, 2, 1}};
  strcpy(sp.y.name, "label");
  sp.y.dtype = ST_FEATURE_INT64;
  return sp;
}

static void test_parse_example(void) {
  size_t n;
  void *ex = make_example(10, 7, &n);
  st_example_spec sp = image_spec();
  float x[4], y[3];
  CHECK_OK(st_parse_example(ex, n, &sp, x, y));
  CHECK_EQ(x[0], 10.0f / 255.0f);
  CHECK_EQ(x[2], 1.0f);
  CHECK_EQ(y[0], 7.0f);
  strcpy(sp.x.name, "vec");
  sp.x.dtype = ST_FEATURE_FLOAT32;
  sp.x.shape = (st_shape){1, {3}};
  CHECK_OK(st_parse_example(ex, n, &sp, x, y));
  CHECK_EQ(x[1], -1.0f);
  sp.x.shape = (st_shape){1, {4}};
  CHECK_EQ(st_parse_example(ex, n, &sp, x, y), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "feature 'vec': 3 values, the spec's shape holds 4") != NULL);
  sp.x.dtype = ST_FEATURE_INT64;
  CHECK_EQ(st_parse_example(ex, n, &sp, x, y), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "holds a float_list, the spec says int64") != NULL);
  strcpy(sp.x.name, "nope");
  CHECK_EQ(st_parse_example(ex, n, &sp, x, y), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "feature 'nope': missing") != NULL);
  CHECK_EQ(st_parse_example("\xff\xff\xff", 3, &sp, x, y), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "not a tf.train.Example") != NULL);
  free(ex);
}

static void test_spec_json(void) {
  const char *p = tmp_path("spec.json");
  const char *good = "{\"x\": {\"name\": \"image\", \"dtype\": \"uint8\", \"shape\": [28, 28, 1]},"
                     " \"y\": {\"name\": \"label\", \"dtype\": \"int64\"}}";
  put_bytes(p, (const unsigned char *)good, strlen(good));
  st_example_spec sp;
  CHECK_OK(st_example_spec_load(p, &sp));
  CHECK_STREQ(sp.x.name, "image");
  CHECK_EQ(sp.x.shape.rank, 3);
  CHECK_EQ(st_feature_spec_size(&sp.x), (size_t)784);
  CHECK_EQ((int)sp.y.dtype, (int)ST_FEATURE_INT64);
  CHECK_EQ(sp.y.shape.rank, 0);
  const char *varlen = "{\"x\": {\"name\": \"v\", \"dtype\": \"float32\", \"var_len\": true}}";
  put_bytes(p, (const unsigned char *)varlen, strlen(varlen));
  CHECK_EQ(st_example_spec_load(p, &sp), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "VarLenFeature is not supported") != NULL);
  const char *bad = "{\"x\": {\"name\": \"v\", \"dtype\": \"string\"}}";
  put_bytes(p, (const unsigned char *)bad, strlen(bad));
  CHECK_EQ(st_example_spec_load(p, &sp), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "\"x\".dtype") != NULL);
}

/* nfiles files of per examples each; example k (global) has label k. */
static void write_shards(const char *stem, int nfiles, int per, st_compression c) {
  st_tfrecord_options o = st_tfrecord_default_options();
  o.compression = c;
  for (int f = 0; f < nfiles; f++) {
    char name[64];
    snprintf(name, sizeof name, "%s-%02d.tfrecord", stem, f);
    st_tfrecord_writer *w = NULL;
    CHECK_OK(st_tfrecord_writer_create(tmp_path(name), &o, &w));
    for (int i = 0; i < per; i++) {
      size_t n;
      void *ex = make_example((uint8_t)i, (int64_t)(f * per + i), &n);
      CHECK_OK(st_tfrecord_writer_write(w, ex, n));
      free(ex);
    }
    CHECK_OK(st_tfrecord_writer_close(w));
  }
}

/* Labels of one pass over ds (unbatched) into out; returns the count. */
static int labels_of(st_dataset *ds, int *out, int cap) {
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  int n = 0;
  for (;;) {
    st_batch b;
    bool end;
    if (st_iterator_next(it, &b, &end) != ST_OK || end) break;
    for (int k = 0; k < b.size && n < cap; k++) out[n++] = (int)b.y[k];
  }
  st_iterator_destroy(it);
  return n;
}

static st_dataset *open_shards(const char *stem, st_tfrecord_dataset_options o) {
  char pat[128];
  snprintf(pat, sizeof pat, "%s-*.tfrecord", stem);
  char **files;
  int nf;
  CHECK_OK(st_list_files(tmp_path(pat), false, 0, &files, &nf));
  o.spec = image_spec();
  st_dataset *ds = NULL;
  st_status s = st_dataset_tfrecord((const char *const *)files, nf, &o, &ds);
  st_list_files_free(files, nf);
  return s == ST_OK ? ds : NULL;
}

static void test_dataset(void) {
  write_shards("ds", 4, 5, ST_COMPRESSION_GZIP);
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  o.record.compression = ST_COMPRESSION_GZIP;
  st_dataset *ds = open_shards("ds", o);
  CHECK(ds != NULL);
  if (!ds) return;
  CHECK_EQ(st_dataset_cardinality(ds), -2);
  CHECK_EQ(st_dataset_x_shape(ds).rank, 3);
  int got[64];
  CHECK_EQ(labels_of(ds, got, 64), 20);
  for (int i = 0; i < 20; i++) CHECK_EQ(got[i], i); /* files in name order, records in order */
  /* batch + shuffle + prefetch over it: every example once */
  CHECK_OK(st_dataset_shuffle(ds, 7, 3, true, &ds));
  CHECK_OK(st_dataset_batch(ds, 6, false, &ds));
  CHECK_OK(st_dataset_prefetch(ds, 2, &ds));
  int seen[20] = {0};
  CHECK_EQ(labels_of(ds, got, 64), 20);
  for (int i = 0; i < 20; i++) seen[got[i]]++;
  for (int i = 0; i < 20; i++) CHECK_EQ(seen[i], 1);
  CHECK_EQ(st_dataset_tfrecord_file_count(ds), 4);
  st_dataset_destroy(ds);
  /* interleave cycle 2, block 2: files 0,1 then 2,3 */
  o.cycle_length = 2;
  o.block_length = 2;
  ds = open_shards("ds", o);
  CHECK_EQ(labels_of(ds, got, 64), 20);
  const int want[20] = {0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 15, 16, 12, 13, 17, 18, 14, 19};
  for (int i = 0; i < 20; i++) CHECK_EQ(got[i], want[i]);
  st_dataset_destroy(ds);
}

/* FILE sharding: 2 workers read 2 files each, together every example once;
 * 5 workers over 4 files is refused. */
static void test_file_shards(void) {
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  o.record.compression = ST_COMPRESSION_GZIP;
  o.num_shards = 2;
  int seen[20] = {0}, got[64];
  for (int w = 0; w < 2; w++) {
    o.shard_index = w;
    st_dataset *ds = open_shards("ds", o);
    CHECK(ds != NULL);
    if (!ds) return;
    CHECK_EQ(st_dataset_tfrecord_file_count(ds), 2);
    int n = labels_of(ds, got, 64);
    CHECK_EQ(n, 10);
    for (int i = 0; i < n; i++) seen[got[i]]++;
    st_dataset_destroy(ds);
  }
  for (int i = 0; i < 20; i++) CHECK_EQ(seen[i], 1);
  o.num_shards = 5;
  o.shard_index = 0;
  CHECK(open_shards("ds", o) == NULL);
  CHECK(strstr(st_last_error(), "needs at least 5 files, got 4") != NULL);
}

/* Skipped records are counted on the dataset; an error stops the pass
 * naming file and offset. */
static void test_dataset_damage(void) {
  write_shards("dmg", 2, 3, ST_COMPRESSION_NONE);
  static unsigned char b[4096];
  const char *p = tmp_path("dmg-01.tfrecord");
  size_t n = file_bytes(p, b, sizeof b);
  b[20] ^= 0x04; /* record 0's payload */
  put_bytes(p, b, n);
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  st_dataset *ds = open_shards("dmg", o);
  int got[16];
  CHECK_EQ(labels_of(ds, got, 16), 3); /* the pass stops at the damage */
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  st_batch bt;
  bool end = false;
  st_status s = ST_OK;
  while (s == ST_OK && !end) s = st_iterator_next(it, &bt, &end);
  CHECK_EQ(s, ST_ERR_FORMAT);
  CHECK_MSG(strstr(st_last_error(), "dmg-01.tfrecord: offset 0: payload CRC mismatch") != NULL,
            "%s", st_last_error());
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
  o.record.skip_corrupt = true;
  ds = open_shards("dmg", o);
  CHECK_EQ(labels_of(ds, got, 16), 5);
  CHECK_EQ(st_dataset_tfrecord_skipped(ds), 1);
  st_dataset_destroy(ds);
}

static void test_list_files(void) {
  char **a, **b;
  int na, nb;
  CHECK_OK(st_list_files(tmp_path("ds-*.tfrecord"), true, 42, &a, &na));
  CHECK_OK(st_list_files(tmp_path("ds-*.tfrecord"), true, 42, &b, &nb));
  CHECK_EQ(na, 4);
  CHECK_EQ(nb, 4);
  for (int i = 0; i < na && i < nb; i++) CHECK_STREQ(a[i], b[i]); /* same seed, same order */
  st_list_files_free(b, nb);
  CHECK_OK(st_list_files(tmp_path("ds-*.tfrecord"), false, 0, &b, &nb));
  for (int i = 1; i < nb; i++) CHECK(strcmp(b[i - 1], b[i]) < 0); /* sorted */
  st_list_files_free(a, na);
  st_list_files_free(b, nb);
  CHECK_EQ(st_list_files(tmp_path("none-*.tfrecord"), false, 0, &a, &na), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "no files match") != NULL);
}

/* Bad arguments: errors, never crashes. */
static void test_misuse(void) {
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  o.spec = image_spec();
  const char *files[2] = {tmp_path("ds-00.tfrecord"), NULL};
  st_dataset *ds = (st_dataset *)1;
  CHECK_EQ(st_dataset_tfrecord(files, 2, &o, &ds), ST_ERR_INVALID);
  CHECK(ds == NULL);
  CHECK(strstr(st_last_error(), "file 1 is NULL") != NULL);
  CHECK_EQ(st_dataset_tfrecord(files, 0, &o, &ds), ST_ERR_INVALID);
  o.cycle_length = 0;
  CHECK_EQ(st_dataset_tfrecord(files, 1, &o, &ds), ST_ERR_INVALID);
  o.cycle_length = 1;
  o.spec.x.shape = (st_shape){4, {1 << 30, 1 << 30, 1 << 30, 1 << 30}};
  CHECK_EQ(st_dataset_tfrecord(files, 1, &o, &ds), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "more than 2^28 values") != NULL);
  o.spec = image_spec();
  o.spec.x.name[0] = 0;
  CHECK_EQ(st_dataset_tfrecord(files, 1, &o, &ds), ST_ERR_INVALID);
  st_tfrecord_reader *r = NULL;
  CHECK_EQ(st_tfrecord_reader_create(tmp_path("missing.tfrecord"), NULL, &r), ST_ERR_IO);
  CHECK(strstr(st_last_error(), "missing.tfrecord") != NULL);
  st_tfrecord_options to = st_tfrecord_default_options();
  to.max_record_bytes = (size_t)1 << 50;
  CHECK_EQ(st_tfrecord_reader_create(files[0], &to, &r), ST_ERR_INVALID);
  CHECK_EQ(st_tfrecord_reader_next(NULL, NULL, NULL, NULL), ST_ERR_INVALID);
  st_tfrecord_reader_destroy(NULL);
  st_tfrecord_writer_destroy(NULL);
  CHECK_EQ(st_dataset_tfrecord_skipped(NULL), 0);
  CHECK_EQ(st_dataset_tfrecord_file_count(NULL), 0);
  st_list_files_free(NULL, 0);
  /* an abandoned writer leaves nothing behind */
  st_tfrecord_writer *w = NULL;
  CHECK_OK(st_tfrecord_writer_create(tmp_path("abandoned.tfrecord"), NULL, &w));
  CHECK_OK(st_tfrecord_writer_write(w, "x", 1));
  st_tfrecord_writer_destroy(w);
  CHECK(access(tmp_path("abandoned.tfrecord"), F_OK) != 0);
}

int main(int argc, char **argv) {
  if (!tmpdir_make("strata_tfr")) return 1;
  static const check_case cases[] = {
      CHECK_CASE(test_framing_known_bytes), CHECK_CASE(test_round_trip),
      CHECK_CASE(test_damage),              CHECK_CASE(test_gigabyte_length),
      CHECK_CASE(test_parse_example),       CHECK_CASE(test_spec_json),
      CHECK_CASE(test_dataset),             CHECK_CASE(test_file_shards),
      CHECK_CASE(test_dataset_damage),      CHECK_CASE(test_list_files),
      CHECK_CASE(test_misuse),
  };
  int rc = CHECK_MAIN(argc, argv, cases);
  tmpdir_remove();
  return rc;
}
