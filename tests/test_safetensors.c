/* safetensors reader/writer: round trip (values, shapes, order, identical bytes
 * on re-write, metadata), write failures, and hostile files — truncation at
 * every length, forged header lengths, bad JSON, duplicate names, wrong dtype,
 * overflowing or negative shapes, bad data_offsets, random bit flips. Every
 * rejection must be ST_ERR_FORMAT with a message naming the file. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "strata/base.h"
#include "io/safetensors.h"

static char g_dir[64];

static void path_in(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", g_dir, name);
}

static int write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = n ? fwrite(p, 1, n, f) : 0;
  return (fclose(f) == 0 && w == n) ? 0 : -1;
}

/* Whole file into a malloc'd buffer; *n its size. */
static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc(len > 0 ? (size_t)len : 1);
  if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *n = (size_t)len;
  return buf;
}

/* A file with the given header text (length prefix from strlen unless
 * forced_len != UINT64_MAX) followed by data_len bytes of data. */
static void write_raw(const char *path, const char *header, size_t data_len,
                      uint64_t forced_len) {
  size_t h = strlen(header);
  uint64_t n = forced_len != UINT64_MAX ? forced_len : h;
  unsigned char *buf = calloc(8 + h + data_len + 1, 1);
  for (int b = 0; b < 8; b++) buf[b] = (unsigned char)(n >> (8 * b));
  memcpy(buf + 8, header, h);
  CHECK(write_bytes(path, buf, 8 + h + data_len) == 0);
  free(buf);
}

/* Read must fail with ST_ERR_FORMAT and a message naming the file. */
static void expect_format(const char *path, const char *what) {
  st_safetensors s;
  st_clear_error();
  st_status r = st__safetensors_read(path, &s);
  CHECK_MSG(r == ST_ERR_FORMAT, "%s: got %s (%s)", what, st_status_string(r),
            st_last_error());
  CHECK_MSG(strstr(st_last_error(), path) != NULL, "%s: message '%s' lacks the path",
            what, st_last_error());
  if (r == ST_OK) st__safetensors_free(&s);
}

static void expect_raw_rejected(const char *what, const char *header,
                                size_t data_len) {
  char path[128];
  path_in(path, sizeof path, "bad.safetensors");
  write_raw(path, header, data_len, UINT64_MAX);
  expect_format(path, what);
}

static float g_k[12], g_b[4];
static st_named_tensor g_t[4];

static void make_tensors(void) {
  for (int i = 0; i < 12; i++) g_k[i] = 0.25f * (float)i - 1.0f;
  for (int i = 0; i < 4; i++) g_b[i] = 1e-3f * (float)(i + 1);
  static float scalar = 3.5f;
  memset(g_t, 0, sizeof g_t);
  snprintf(g_t[0].name, sizeof g_t[0].name, "dense/kernel");
  g_t[0].rank = 2, g_t[0].dims[0] = 3, g_t[0].dims[1] = 4, g_t[0].data = g_k;
  snprintf(g_t[1].name, sizeof g_t[1].name, "dense/bias");
  g_t[1].rank = 1, g_t[1].dims[0] = 4, g_t[1].data = g_b;
  snprintf(g_t[2].name, sizeof g_t[2].name, "empty");
  g_t[2].rank = 2, g_t[2].dims[0] = 0, g_t[2].dims[1] = 5, g_t[2].data = NULL;
  snprintf(g_t[3].name, sizeof g_t[3].name, "step");
  g_t[3].rank = 0, g_t[3].data = &scalar;
}

static const char *g_mk[] = {"format", "strata_model"};
static const char *g_mv[] = {"pt", "{\"name\": \"cnn\", \"épochs\": 3}"};

static void test_round_trip(void) {
  char p1[128], p2[128];
  path_in(p1, sizeof p1, "a.safetensors");
  path_in(p2, sizeof p2, "b.safetensors");
  CHECK_OK(st__safetensors_write(p1, g_t, 4, g_mk, g_mv, 2));
  st_safetensors s;
  CHECK_OK(st__safetensors_read(p1, &s));
  CHECK(s.n == 4);
  for (int i = 0; i < s.n && i < 4; i++) {
    const st_named_tensor *a = &g_t[i], *b = &s.tensors[i];
    CHECK_MSG(strcmp(a->name, b->name) == 0, "%s vs %s", a->name, b->name);
    CHECK(a->rank == b->rank);
    size_t count = 1;
    for (int d = 0; d < a->rank; d++) {
      CHECK(a->dims[d] == b->dims[d]);
      count *= (size_t)a->dims[d];
    }
    CHECK(count == 0 || memcmp(a->data, b->data, count * sizeof(float)) == 0);
    CHECK(((uintptr_t)b->data % sizeof(float)) == 0);
  }
  CHECK(st__safetensors_find(&s, "dense/bias") == &s.tensors[1]);
  CHECK(st__safetensors_find(&s, "nope") == NULL);
  /* Re-writing what was read gives the same bytes. */
  if (s.n == 4) CHECK_OK(st__safetensors_write(p2, s.tensors, s.n, g_mk, g_mv, 2));
  st__safetensors_free(&s);
  CHECK(s.n == 0 && s.tensors == NULL && s.blob == NULL);
  st__safetensors_free(&s); /* twice is harmless */
  size_t n1 = 0, n2 = 0;
  unsigned char *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2);
  CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0);
  free(b1);
  free(b2);
}

/* Header layout and metadata, checked by parsing the file independently. */
static void test_metadata_and_layout(void) {
  char p[128];
  path_in(p, sizeof p, "a.safetensors");
  size_t n = 0;
  unsigned char *buf = slurp(p, &n);
  CHECK(buf && n >= 8);
  if (!buf || n < 8) return;
  uint64_t h = 0;
  for (int b = 7; b >= 0; b--) h = (h << 8) | buf[b];
  CHECK(h % 8 == 0);
  CHECK(8 + h + (12 + 4 + 1) * 4 == n);
  CHECK(buf[8] == '{');
  json_error_t err;
  json_t *root = json_loadb((const char *)buf + 8, (size_t)h, 0, &err);
  CHECK_MSG(root != NULL, "%s", err.text);
  json_t *meta = json_object_get(root, "__metadata__");
  CHECK(json_is_object(meta) && json_object_size(meta) == 2);
  for (int i = 0; i < 2; i++)
    CHECK(json_is_string(json_object_get(meta, g_mk[i])) &&
          strcmp(json_string_value(json_object_get(meta, g_mk[i])), g_mv[i]) == 0);
  json_t *bias = json_object_get(root, "dense/bias");
  json_int_t b0 = -1, b1 = -1;
  CHECK(json_unpack(json_object_get(bias, "data_offsets"), "[II]", &b0, &b1) == 0);
  CHECK(b0 == 48 && b1 == 64);
  CHECK(strcmp(json_string_value(json_object_get(bias, "dtype")), "F32") == 0);
  json_decref(root);
  /* No metadata given: no __metadata__ key, file still reads. */
  CHECK_OK(st__safetensors_write(p, g_t, 2, NULL, NULL, 0));
  st_safetensors s;
  CHECK_OK(st__safetensors_read(p, &s));
  CHECK(s.n == 2);
  st__safetensors_free(&s);
  free(buf);
  buf = slurp(p, &n);
  CHECK(buf && !strstr((const char *)buf + 8, "__metadata__"));
  free(buf);
  /* Zero tensors. */
  CHECK_OK(st__safetensors_write(p, NULL, 0, NULL, NULL, 0));
  CHECK_OK(st__safetensors_read(p, &s));
  CHECK(s.n == 0);
  st__safetensors_free(&s);
}

static void test_write_errors(void) {
  char p[128];
  path_in(p, sizeof p, "no/such/dir/w.safetensors");
  CHECK(st__safetensors_write(p, g_t, 2, NULL, NULL, 0) == ST_ERR_IO);
  CHECK(strstr(st_last_error(), p) != NULL);
  path_in(p, sizeof p, "w.safetensors");
  st_named_tensor dup[2] = {g_t[1], g_t[1]};
  CHECK(st__safetensors_write(p, dup, 2, NULL, NULL, 0) == ST_ERR_INVALID);
  st_named_tensor neg = g_t[1];
  neg.dims[0] = -1;
  CHECK(st__safetensors_write(p, &neg, 1, NULL, NULL, 0) == ST_ERR_INVALID);
  CHECK(access(p, F_OK) != 0); /* nothing written */
  path_in(p, sizeof p, "missing.safetensors");
  st_safetensors s;
  CHECK(st__safetensors_read(p, &s) == ST_ERR_IO);
  CHECK(strstr(st_last_error(), p) != NULL);
}

static void test_truncation(void) {
  char p[128], q[128];
  path_in(p, sizeof p, "a.safetensors");
  path_in(q, sizeof q, "trunc.safetensors");
  CHECK_OK(st__safetensors_write(p, g_t, 2, g_mk, g_mv, 1));
  size_t n = 0;
  unsigned char *buf = slurp(p, &n);
  CHECK(buf != NULL);
  for (size_t len = 0; buf && len < n; len++) {
    CHECK(write_bytes(q, buf, len) == 0);
    char what[64];
    snprintf(what, sizeof what, "truncated to %zu of %zu bytes", len, n);
    expect_format(q, what);
  }
  free(buf);
}

static void test_bad_headers(void) {
  char p[128];
  path_in(p, sizeof p, "bad.safetensors");
  write_raw(p, "{}", 4, 1000);
  expect_format(p, "header length larger than the file");
  write_raw(p, "{}", 0, UINT64_MAX - 3);
  expect_format(p, "header length near 2^64");
  write_raw(p, "{}", 0, (uint64_t)200 * 1000 * 1000);
  expect_format(p, "header length over 100 MB");
  expect_raw_rejected("header not JSON", "{\"a\": not json}", 0);
  expect_raw_rejected("header not an object", "[1, 2, 3]", 0);
  expect_raw_rejected("header with leading space", " {}", 0);
  expect_raw_rejected("empty header", "", 0);
  expect_raw_rejected("duplicate tensor names",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
  expect_raw_rejected("dtype F16",
      "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
  expect_raw_rejected("dtype missing", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_raw_rejected("shape product overflow",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
      "\"data_offsets\":[0,4]}}", 4);
  expect_raw_rejected("byte size overflow",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
      "\"data_offsets\":[0,0]}}", 0);
  expect_raw_rejected("integer beyond int64",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],"
      "\"data_offsets\":[0,4]}}", 4);
  expect_raw_rejected("negative dim",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1,2],\"data_offsets\":[0,8]}}", 8);
  expect_raw_rejected("non-integer dim",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8);
  expect_raw_rejected("rank 5",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4);
  expect_raw_rejected("offsets beyond the buffer",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
  expect_raw_rejected("offsets reversed",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8);
  expect_raw_rejected("negative offset",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4);
  expect_raw_rejected("offsets not a pair",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4);
  expect_raw_rejected("overlapping tensors",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12);
  expect_raw_rejected("same range twice",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
  expect_raw_rejected("gap between tensors",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20);
  expect_raw_rejected("trailing bytes not covered",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12);
  expect_raw_rejected("data but no tensors", "{}", 4);
  expect_raw_rejected("shape/offset size mismatch",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
  expect_raw_rejected("unaligned F32 range",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 6);
  expect_raw_rejected("unknown field",
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4);
  expect_raw_rejected("tensor entry not an object", "{\"a\":[1]}", 0);
  expect_raw_rejected("metadata value not a string",
      "{\"__metadata__\":{\"epoch\":3}}", 0);
  expect_raw_rejected("metadata not an object", "{\"__metadata__\":\"x\"}", 0);
  expect_raw_rejected("empty tensor name",
      "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  /* A well-formed hand-written file with padding and tensors listed out of
   * offset order is accepted. */
  write_raw(p,
      "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}      ",
      8, UINT64_MAX);
  st_safetensors s;
  CHECK_OK(st__safetensors_read(p, &s));
  CHECK(s.n == 2 && strcmp(s.tensors[0].name, "b") == 0);
  st__safetensors_free(&s);
}

/* 200 random single-bit flips in the length + header: never a crash; either
 * rejected with the file named, or accepted. */
/* Header only, then tensors one at a time by offset, and the streamed
 * checksums (a pipeline stage's restore): the same data and CRCs as a whole
 * read; a header whose order is not the data's; a file that changed size. */
static void test_header_and_offsets(void) {
  char p[128];
  path_in(p, sizeof p, "h.safetensors");
  CHECK_OK(st__safetensors_write(p, g_t, 4, g_mk, g_mv, 2));
  st_safetensors whole, h;
  CHECK_OK(st__safetensors_read(p, &whole));
  CHECK_OK(st__safetensors_read_header(p, &h));
  CHECK(h.n == 4 && h.blob == NULL && h.offsets != NULL);
  uint32_t file_crc = 0, crc[4] = {0};
  CHECK_OK(st__safetensors_checksums(p, &h, &file_crc, crc));
  size_t n = 0;
  unsigned char *bytes = slurp(p, &n);
  CHECK(bytes && file_crc == st_crc32c(0, bytes, n));
  free(bytes);
  for (int i = 0; i < h.n && i < 4; i++) {
    size_t count = 1;
    for (int d = 0; d < h.tensors[i].rank; d++) count *= (size_t)h.tensors[i].dims[d];
    CHECK(h.tensors[i].data == NULL && strcmp(h.tensors[i].name, whole.tensors[i].name) == 0);
    float buf[16] = {0};
    if (count) CHECK_OK(st__safetensors_read_tensor(p, &h, i, buf));
    CHECK(count == 0 || memcmp(buf, whole.tensors[i].data, count * sizeof(float)) == 0);
    CHECK_EQ(crc[i], st_crc32c(0, whole.tensors[i].data, count * sizeof(float)));
  }
  st__safetensors_free(&whole);
  st__safetensors_free(&h);
  CHECK(h.offsets == NULL);
  /* the header lists b before a, the data holds a then b */
  const char *hdr = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  size_t hl = strlen(hdr);
  unsigned char raw[512] = {0};
  for (int b = 0; b < 8; b++) raw[b] = (unsigned char)((uint64_t)hl >> (8 * b));
  memcpy(raw + 8, hdr, hl);
  float data[3] = {1.5f, -2.0f, 7.25f};
  memcpy(raw + 8 + hl, data, sizeof data);
  CHECK(write_bytes(p, raw, 8 + hl + sizeof data) == 0);
  CHECK_OK(st__safetensors_read_header(p, &h));
  CHECK_OK(st__safetensors_checksums(p, &h, &file_crc, crc));
  CHECK(h.n == 2 && strcmp(h.tensors[0].name, "b") == 0);
  CHECK_EQ(crc[0], st_crc32c(0, &data[2], 4));
  CHECK_EQ(crc[1], st_crc32c(0, data, 8));
  float got[2] = {0};
  CHECK_OK(st__safetensors_read_tensor(p, &h, 1, got));
  CHECK(got[0] == 1.5f && got[1] == -2.0f);
  CHECK(write_bytes(p, raw, 8 + hl + sizeof data - 4) == 0); /* shorter since */
  st_clear_error();
  CHECK_EQ(st__safetensors_read_tensor(p, &h, 1, got), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "changed while it was read") != NULL);
  st__safetensors_free(&h);
}

static void test_bit_flips(void) {
  char p[128], q[128];
  path_in(p, sizeof p, "a.safetensors");
  path_in(q, sizeof q, "flip.safetensors");
  CHECK_OK(st__safetensors_write(p, g_t, 4, g_mk, g_mv, 2));
  size_t n = 0;
  unsigned char *buf = slurp(p, &n);
  CHECK(buf != NULL);
  if (!buf) return;
  uint64_t h = 0;
  for (int b = 7; b >= 0; b--) h = (h << 8) | buf[b];
  uint64_t state = 0x9E3779B97F4A7C15ull;
  int accepted = 0;
  for (int i = 0; i < 200; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    size_t byte = (size_t)((state >> 33) % (8 + h));
    int bit = (int)((state >> 20) & 7);
    buf[byte] ^= (unsigned char)(1u << bit);
    CHECK(write_bytes(q, buf, n) == 0);
    buf[byte] ^= (unsigned char)(1u << bit);
    st_safetensors s;
    st_status r = st__safetensors_read(q, &s);
    CHECK_MSG(r == ST_OK || r == ST_ERR_FORMAT, "flip byte %zu bit %d: %s (%s)",
              byte, bit, st_status_string(r), st_last_error());
    if (r == ST_OK) {
      accepted++;
      st__safetensors_free(&s);
    } else {
      CHECK(strstr(st_last_error(), q) != NULL);
    }
  }
  fprintf(stderr, "bit flips: %d of 200 accepted\n", accepted);
  free(buf);
}

static void remove_dir(void) {
  DIR *d = opendir(g_dir);
  struct dirent *e;
  int leftovers = 0;
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (strstr(e->d_name, ".tmp.")) leftovers++;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  CHECK_MSG(leftovers == 0, "%d temp files left behind", leftovers);
  rmdir(g_dir);
}

static const check_case cases[] = {
    CHECK_CASE(test_round_trip), CHECK_CASE(test_metadata_and_layout), CHECK_CASE(test_write_errors),
    CHECK_CASE(test_truncation), CHECK_CASE(test_bad_headers),         CHECK_CASE(test_bit_flips),
    CHECK_CASE(test_header_and_offsets)};

int main(int argc, char **argv) {
  snprintf(g_dir, sizeof g_dir, "/tmp/strata_st_XXXXXX");
  if (!mkdtemp(g_dir)) check_skip("mkdtemp failed");
  make_tensors();
  int rc = CHECK_MAIN(argc, argv, cases);
  remove_dir();
  return rc;
}
