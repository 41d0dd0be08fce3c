/* safetensors reader and writer (F32 only); the format and the guarantees are
 * described in safetensors.h. Layout written:
 *   [u64 LE N][N bytes JSON header, space-padded to a multiple of 8][buffer]
 * The header is compact JSON: "__metadata__" first (when given), then the
 * tensors in the caller's order, each {"dtype","shape","data_offsets"}, with
 * offsets relative to the start of the buffer and tensors packed back to back.
 * Reading parses and validates the whole header before the buffer is
 * allocated, so no allocation is driven by an unchecked number. */
#define _POSIX_C_SOURCE 200809L
#include "base/fileio.h"
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/base.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors.c assumes a little-endian host");

#define ST_SAFETENSORS_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
#define ST_META_KEY "__metadata__"

/* ---- writing ------------------------------------------------------------ */

static uint64_t tensor_count(const st_named_tensor *t) {
  uint64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= (uint64_t)t->dims[d];
  return n;
}

/* Check the caller's tensors: names unique, non-empty, not reserved; shapes
 * sane. Programmer-facing, so ST_ERR_INVALID. */
static st_status check_write_args(const char *path, const st_named_tensor *t,
                                  int n, bool need_data) {
  for (int i = 0; i < n; i++) {
    const char *name = t[i].name;
    if (name[0] == '\0' || !memchr(name, '\0', sizeof t[i].name) ||
        strcmp(name, ST_META_KEY) == 0)
      return st_error(ST_ERR_INVALID, "%s: tensor %d: invalid name '%.127s'",
                      path, i, name);
    if (t[i].rank < 0 || t[i].rank > ST_MAX_RANK)
      return st_error(ST_ERR_INVALID, "%s: tensor '%s': rank %d not in [0, %d]",
                      path, name, t[i].rank, ST_MAX_RANK);
    uint64_t count = 1;
    for (int d = 0; d < t[i].rank; d++)
      if (t[i].dims[d] < 0 ||
          __builtin_mul_overflow(count, (uint64_t)t[i].dims[d], &count))
        return st_error(ST_ERR_INVALID, "%s: tensor '%s': bad dim %d = %lld",
                        path, name, d, (long long)t[i].dims[d]);
    if (need_data && count > 0 && !t[i].data)
      return st_error(ST_ERR_INVALID, "%s: tensor '%s': NULL data", path, name);
    for (int j = 0; j < i; j++)
      if (strcmp(t[j].name, name) == 0)
        return st_error(ST_ERR_INVALID, "%s: duplicate tensor name '%s'", path,
                        name);
  }
  return ST_OK;
}

static json_t *tensor_entry(const st_named_tensor *t, uint64_t begin,
                            uint64_t end) {
  json_t *shape = json_array();
  for (int d = 0; shape && d < t->rank; d++)
    json_array_append_new(shape, json_integer((json_int_t)t->dims[d]));
  json_t *offs = json_pack("[II]", (json_int_t)begin, (json_int_t)end);
  json_t *e = json_pack("{s:s, s:o, s:o}", "dtype", "F32", "shape", shape,
                        "data_offsets", offs);
  return e; /* json_pack steals shape/offs, even on failure (NULL) */
}

/* The header JSON, space-padded to a multiple of 8 (caller frees *out). */
static st_status build_header(const char *path, const st_named_tensor *t,
                              int n, const char *const *mk,
                              const char *const *mv, int nmeta, char **out,
                              size_t *out_len) {
  json_t *root = json_object();
  if (!root) return st_error(ST_ERR_NOMEM, "%s: building header", path);
  if (nmeta > 0) {
    json_t *meta = json_object();
    json_object_set_new(root, ST_META_KEY, meta);
    for (int i = 0; meta && i < nmeta; i++) {
      json_t *v = json_string(mv[i]);
      if (!mk[i] || !v || json_object_set_new(meta, mk[i], v) != 0) {
        json_decref(root);
        return st_error(ST_ERR_INVALID,
                        "%s: metadata %d ('%s'): key or value is not UTF-8",
                        path, i, mk[i] ? mk[i] : "(null)");
      }
    }
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    uint64_t bytes = tensor_count(&t[i]) * sizeof(float);
    json_t *e = tensor_entry(&t[i], off, off + bytes);
    if (!e || json_object_set_new(root, t[i].name, e) != 0) {
      json_decref(root);
      return st_error(ST_ERR_INVALID,
                      "%s: tensor '%s': cannot add to header (name not UTF-8?)",
                      path, t[i].name);
    }
    off += bytes;
  }
  char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!s) return st_error(ST_ERR_NOMEM, "%s: serializing header", path);
  size_t len = strlen(s), padded = (len + 7) / 8 * 8;
  char *buf = realloc(s, padded + 1);
  if (!buf) {
    free(s);
    return st_error(ST_ERR_NOMEM, "%s: header of %zu bytes", path, padded);
  }
  memset(buf + len, ' ', padded - len);
  buf[padded] = '\0';
  *out = buf;
  *out_len = padded;
  return ST_OK;
}


/* Write header + tensors into an open stream; 0 or -1 with errno (the
 * atomic commit flushes and fsyncs). */
static int write_body(FILE *f, const char *hdr, size_t hdr_len,
                      const st_named_tensor *t, int n) {
  unsigned char len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)hdr_len >> (8 * b));
  if (fwrite(len8, 1, 8, f) != 8 || fwrite(hdr, 1, hdr_len, f) != hdr_len)
    return -1;
  for (int i = 0; i < n; i++) {
    size_t count = (size_t)tensor_count(&t[i]);
    if (count && fwrite(t[i].data, sizeof(float), count, f) != count) return -1;
  }
  return 0;
}

st_status st__safetensors_write(const char *path, const st_named_tensor *t,
                                int n, const char *const *meta_keys,
                                const char *const *meta_values, int nmeta) {
  ST_ASSERT(path && n >= 0 && (n == 0 || t) && nmeta >= 0);
  ST_ASSERT(nmeta == 0 || (meta_keys && meta_values));
  st_status s = check_write_args(path, t, n, true);
  if (s) return s;
  char *hdr = NULL;
  size_t hdr_len = 0;
  s = build_header(path, t, n, meta_keys, meta_values, nmeta, &hdr, &hdr_len);
  if (s) return s;

  st__atomic_file a;
  s = st__atomic_open(&a, path);
  if (s == ST_OK) s = st__atomic_commit(&a, write_body(a.f, hdr, hdr_len, t, n) == 0 ? 0 : errno);
  free(hdr);
  return s;
}

/* write_body with each tensor's data from fetch. */
typedef struct fetch_body {
  const char *hdr;
  size_t hdr_len;
  const st_named_tensor *t;
  int n;
  st_status (*fetch)(void *arg, int k, const float **data);
  void *arg;
  st_status failed; /* fetch's status, when it failed */
} fetch_body;

static int write_fetched(FILE *f, fetch_body *b) {
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)b->hdr_len >> (8 * i));
  if (fwrite(len8, 1, 8, f) != 8 || fwrite(b->hdr, 1, b->hdr_len, f) != b->hdr_len) return -1;
  for (int i = 0; i < b->n; i++) {
    size_t count = (size_t)tensor_count(&b->t[i]);
    const float *data = NULL;
    if (!count) continue;
    if ((b->failed = b->fetch(b->arg, i, &data)) != ST_OK) return 0;
    if (fwrite(data, sizeof(float), count, f) != count) return -1;
  }
  return 0;
}

st_status st__safetensors_write_fetch(const char *path, const st_named_tensor *t, int n,
                                      const char *const *meta_keys,
                                      const char *const *meta_values, int nmeta,
                                      st_status (*fetch)(void *arg, int k, const float **data),
                                      void *arg) {
  ST_ASSERT(path && n >= 0 && (n == 0 || t) && nmeta >= 0 && fetch);
  ST_ASSERT(nmeta == 0 || (meta_keys && meta_values));
  st_status s = check_write_args(path, t, n, false);
  if (s) return s;
  fetch_body b = {.t = t, .n = n, .fetch = fetch, .arg = arg};
  s = build_header(path, t, n, meta_keys, meta_values, nmeta, (char **)&b.hdr, &b.hdr_len);
  if (s) return s;
  st__atomic_file a;
  s = st__atomic_open(&a, path);
  if (s == ST_OK) {
    int rc = write_fetched(a.f, &b);
    if (b.failed != ST_OK) {
      st__atomic_abort(&a);
      s = b.failed;
    } else {
      s = st__atomic_commit(&a, rc == 0 ? 0 : errno);
    }
  }
  free((char *)b.hdr);
  return s;
}

/* ---- reading ------------------------------------------------------------ */

/* read() exactly n bytes at offset; ST_ERR_FORMAT if the file ends early. */
static st_status read_exact(int fd, const char *path, void *buf, size_t n,
                            uint64_t offset) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return st_error(ST_ERR_IO, "%s: read at offset %llu: %s", path,
                      (unsigned long long)(offset + got), strerror(errno));
    if (r == 0)
      return st_error(ST_ERR_FORMAT, "%s: unexpected end of file at offset %llu",
                      path, (unsigned long long)(offset + got));
    got += (size_t)r;
  }
  return ST_OK;
}

/* One tensor's validated header entry. */
typedef struct entry {
  const char *name; /* points into the json tree */
  int rank;
  int64_t dims[ST_MAX_RANK];
  uint64_t begin, end;
} entry;

static st_status parse_shape(const char *path, const char *name, json_t *shape,
                             entry *e) {
  if (!json_is_array(shape))
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s': field 'shape' is not an array",
                    path, name);
  size_t rank = json_array_size(shape);
  if (rank > ST_MAX_RANK)
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s': field 'shape' has rank %zu (max %d)",
                    path, name, rank, ST_MAX_RANK);
  uint64_t count = 1;
  for (size_t d = 0; d < rank; d++) {
    json_t *v = json_array_get(shape, d);
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
    if (x < 0)
      return st_error(ST_ERR_FORMAT,
                      "%s: tensor '%s': field 'shape' dim %zu is not a non-negative integer",
                      path, name, d);
    if (__builtin_mul_overflow(count, (uint64_t)x, &count) ||
        __builtin_mul_overflow(count, (uint64_t)sizeof(float), &(uint64_t){0}))
      return st_error(ST_ERR_FORMAT,
                      "%s: tensor '%s': field 'shape': element count overflows at dim %zu",
                      path, name, d);
    e->dims[d] = (int64_t)x;
  }
  e->rank = (int)rank;
  e->end = count * sizeof(float); /* byte size, until offsets are read */
  return ST_OK;
}

static st_status parse_offsets(const char *path, const char *name, json_t *offs,
                               uint64_t buffer_len, entry *e) {
  json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
  if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) ||
      !json_is_integer(en) || json_integer_value(b) < 0 || json_integer_value(en) < 0)
    return st_error(ST_ERR_FORMAT,
                    "%s: tensor '%s': field 'data_offsets' is not [begin, end] "
                    "with non-negative integers", path, name);
  uint64_t begin = (uint64_t)json_integer_value(b);
  uint64_t end = (uint64_t)json_integer_value(en);
  if (begin > end || end > buffer_len)
    return st_error(ST_ERR_FORMAT,
                    "%s: tensor '%s': field 'data_offsets' [%llu, %llu] outside "
                    "the %llu-byte data buffer", path, name,
                    (unsigned long long)begin, (unsigned long long)end,
                    (unsigned long long)buffer_len);
  uint64_t bytes = e->end;
  if (end - begin != bytes)
    return st_error(ST_ERR_FORMAT,
                    "%s: tensor '%s': field 'data_offsets' spans %llu bytes but "
                    "shape needs %llu", path, name,
                    (unsigned long long)(end - begin), (unsigned long long)bytes);
  e->begin = begin;
  e->end = end;
  return ST_OK;
}

static st_status parse_entry(const char *path, const char *name, json_t *v,
                             uint64_t buffer_len, entry *e) {
  if (strlen(name) == 0 || strlen(name) >= sizeof(((st_named_tensor *)0)->name))
    return st_error(ST_ERR_FORMAT, "%s: tensor '%.64s': name length %zu not in [1, %zu]",
                    path, name, strlen(name), sizeof(((st_named_tensor *)0)->name) - 1);
  if (!json_is_object(v))
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s': entry is not an object", path, name);
  const char *key;
  json_t *field;
  json_object_foreach(v, key, field) {
    if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
      return st_error(ST_ERR_FORMAT, "%s: tensor '%s': unknown field '%s'", path,
                      name, key);
  }
  json_t *dtype = json_object_get(v, "dtype");
  if (!json_is_string(dtype))
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s': field 'dtype' missing or not a string",
                    path, name);
  if (strcmp(json_string_value(dtype), "F32") != 0)
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s': field 'dtype' is '%s' (only F32 is supported)",
                    path, name, json_string_value(dtype));
  e->name = name;
  st_status s = parse_shape(path, name, json_object_get(v, "shape"), e);
  if (s) return s;
  return parse_offsets(path, name, json_object_get(v, "data_offsets"), buffer_len, e);
}

static st_status check_metadata(const char *path, json_t *meta) {
  if (!json_is_object(meta))
    return st_error(ST_ERR_FORMAT, "%s: field '" ST_META_KEY "' is not an object", path);
  const char *key;
  json_t *v;
  json_object_foreach(meta, key, v) {
    if (!json_is_string(v))
      return st_error(ST_ERR_FORMAT, "%s: field '" ST_META_KEY "': value of '%s' "
                      "is not a string", path, key);
  }
  return ST_OK;
}

static int cmp_range(const void *a, const void *b) {
  const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

/* Ranges must tile [0, buffer_len) exactly: no gap, no overlap. */
static st_status check_coverage(const char *path, entry *e, size_t n,
                                uint64_t buffer_len) {
  entry **order = malloc((n ? n : 1) * sizeof *order);
  if (!order) return st_error(ST_ERR_NOMEM, "%s: %zu tensors", path, n);
  for (size_t i = 0; i < n; i++) order[i] = &e[i];
  qsort(order, n, sizeof *order, cmp_range);
  st_status s = ST_OK;
  uint64_t pos = 0;
  for (size_t i = 0; i < n && !s; i++) {
    if (order[i]->begin < pos)
      s = st_error(ST_ERR_FORMAT, "%s: tensor '%s': data_offsets begin %llu overlaps "
                   "tensor '%s' (ends at %llu)", path, order[i]->name,
                   (unsigned long long)order[i]->begin, order[i - 1]->name,
                   (unsigned long long)pos);
    else if (order[i]->begin > pos)
      s = st_error(ST_ERR_FORMAT, "%s: tensor '%s': data_offsets begin %llu leaves "
                   "bytes [%llu, %llu) of the buffer unused", path, order[i]->name,
                   (unsigned long long)order[i]->begin, (unsigned long long)pos,
                   (unsigned long long)order[i]->begin);
    pos = order[i]->end;
  }
  free(order);
  if (!s && pos != buffer_len)
    s = st_error(ST_ERR_FORMAT, "%s: tensors cover %llu bytes of the %llu-byte data "
                 "buffer (byte offset %llu onward unused)", path,
                 (unsigned long long)pos, (unsigned long long)buffer_len,
                 (unsigned long long)pos);
  return s;
}

/* Parse and validate the header; on success *entries (malloc'd, [*n]) point
 * into *root, which the caller releases. */
static st_status parse_header(const char *path, const char *hdr, size_t len,
                              uint64_t buffer_len, json_t **root_out,
                              entry **entries, size_t *n) {
  if (len == 0 || hdr[0] != '{')
    return st_error(ST_ERR_FORMAT, "%s: header (byte offset 8) does not start with '{'",
                    path);
  json_error_t jerr;
  json_t *root = json_loadb(hdr, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return st_error(ST_ERR_FORMAT, "%s: header is not valid JSON at byte offset %lld: %s",
                    path, 8LL + (long long)jerr.position, jerr.text);
  st_status s = ST_OK;
  size_t cap = json_object_size(root), k = 0;
  entry *e = calloc(cap ? cap : 1, sizeof *e);
  if (!e) s = st_error(ST_ERR_NOMEM, "%s: %zu header entries", path, cap);
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (s) break;
    if (strcmp(key, ST_META_KEY) == 0) s = check_metadata(path, v);
    else s = parse_entry(path, key, v, buffer_len, &e[k++]);
  }
  if (!s) s = check_coverage(path, e, k, buffer_len);
  if (s) {
    free(e);
    json_decref(root);
    return s;
  }
  *root_out = root;
  *entries = e;
  *n = k;
  return ST_OK;
}

/* Read the 8-byte length and the header text (NUL-terminated, caller frees). */
static st_status read_header(int fd, const char *path, uint64_t file_size,
                             char **hdr_out, uint64_t *hdr_len) {
  if (file_size < 8)
    return st_error(ST_ERR_FORMAT, "%s: file is %llu bytes, shorter than the 8-byte "
                    "header length", path, (unsigned long long)file_size);
  unsigned char len8[8];
  st_status s = read_exact(fd, path, len8, 8, 0);
  if (s) return s;
  uint64_t n = 0;
  for (int b = 7; b >= 0; b--) n = (n << 8) | len8[b];
  if (n > ST_SAFETENSORS_MAX_HEADER)
    return st_error(ST_ERR_FORMAT, "%s: header length %llu (byte offset 0) exceeds "
                    "the 100 MB limit", path, (unsigned long long)n);
  if (n > file_size - 8)
    return st_error(ST_ERR_FORMAT, "%s: header length %llu (byte offset 0) runs past "
                    "the end of the %llu-byte file", path, (unsigned long long)n,
                    (unsigned long long)file_size);
  char *hdr = malloc((size_t)n + 1);
  if (!hdr) return st_error(ST_ERR_NOMEM, "%s: header of %llu bytes", path,
                            (unsigned long long)n);
  s = read_exact(fd, path, hdr, (size_t)n, 8);
  if (s) {
    free(hdr);
    return s;
  }
  hdr[n] = '\0';
  *hdr_out = hdr;
  *hdr_len = n;
  return ST_OK;
}

/* header_only: names, shapes and each tensor's file offset (data NULL). */
static st_status index_tensors(const char *path, const entry *e, size_t n, uint64_t data_start,
                               uint64_t file_size, st_safetensors *out) {
  out->tensors = st_calloc(n ? n : 1, sizeof *out->tensors);
  out->offsets = st_calloc(n ? n : 1, sizeof *out->offsets);
  if (!out->tensors || !out->offsets) {
    st__safetensors_free(out);
    return st_error(ST_ERR_NOMEM, "%s: %zu header entries", path, n);
  }
  for (size_t i = 0; i < n; i++) {
    st_named_tensor *t = &out->tensors[i];
    snprintf(t->name, sizeof t->name, "%s", e[i].name);
    t->rank = e[i].rank;
    memcpy(t->dims, e[i].dims, sizeof t->dims);
    out->offsets[i] = data_start + e[i].begin;
  }
  out->n = (int)n;
  out->data_start = data_start;
  out->file_size = file_size;
  return ST_OK;
}

/* Build *out from validated entries: read the buffer, point tensors into it. */
static st_status load_tensors(int fd, const char *path, const entry *e, size_t n,
                              uint64_t data_start, uint64_t buffer_len,
                              st_safetensors *out) {
  out->tensors = st_calloc(n ? n : 1, sizeof *out->tensors);
  out->blob = st_alloc(buffer_len ? (size_t)buffer_len : 64);
  if (!out->tensors || !out->blob) {
    st__safetensors_free(out);
    return st_error(ST_ERR_NOMEM, "%s: %llu bytes of tensor data", path,
                    (unsigned long long)buffer_len);
  }
  st_status s = read_exact(fd, path, out->blob, (size_t)buffer_len, data_start);
  if (s) {
    st__safetensors_free(out);
    return s;
  }
  for (size_t i = 0; i < n; i++) {
    st_named_tensor *t = &out->tensors[i];
    snprintf(t->name, sizeof t->name, "%s", e[i].name);
    t->rank = e[i].rank;
    memcpy(t->dims, e[i].dims, sizeof t->dims);
    /* Tiling F32 ranges from 0 keeps every begin a multiple of 4. */
    t->data = (float *)((char *)out->blob + e[i].begin);
  }
  out->n = (int)n;
  return ST_OK;
}

static st_status read_file(const char *path, bool header_only, st_safetensors *out) {
  ST_ASSERT(path && out);
  memset(out, 0, sizeof *out);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
  if (fd < 0) return st_error(ST_ERR_IO, "%s: %s", path, strerror(errno));
  struct stat sb;
  st_status s = ST_OK;
  char *hdr = NULL;
  uint64_t hdr_len = 0;
  json_t *root = NULL;
  entry *e = NULL;
  size_t n = 0;
  if (fstat(fd, &sb) != 0) {
    s = st_error(ST_ERR_IO, "%s: stat: %s", path, strerror(errno));
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {
    s = st_error(ST_ERR_FORMAT, "%s: not a regular file", path);
    goto done;
  }
  int fl = fcntl(fd, F_GETFL); /* a regular file: back to blocking reads */
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    s = st_error(ST_ERR_IO, "%s: fcntl: %s", path, strerror(errno));
    goto done;
  }
  uint64_t size = (uint64_t)sb.st_size;
  s = read_header(fd, path, size, &hdr, &hdr_len);
  if (s) goto done;
  uint64_t buffer_len = size - 8 - hdr_len;
  s = parse_header(path, hdr, (size_t)hdr_len, buffer_len, &root, &e, &n);
  if (s) goto done;
  if (n > (size_t)INT32_MAX) {
    s = st_error(ST_ERR_FORMAT, "%s: %zu tensors", path, n);
    goto done;
  }
  s = header_only ? index_tensors(path, e, n, 8 + hdr_len, size, out)
                  : load_tensors(fd, path, e, n, 8 + hdr_len, buffer_len, out);
done:
  free(e);
  json_decref(root);
  free(hdr);
  close(fd);
  return s;
}

st_status st__safetensors_read(const char *path, st_safetensors *out) {
  return read_file(path, false, out);
}

st_status st__safetensors_read_header(const char *path, st_safetensors *out) {
  return read_file(path, true, out);
}

/* Open path for the reads below: a regular file of the size the header was
 * read from (replaced or truncated since: a clear error, not garbage). */
static st_status reopen(const char *path, const st_safetensors *s, int *fd) {
  *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (*fd < 0) return st_error(ST_ERR_IO, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(*fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != s->file_size) {
    close(*fd);
    return st_error(ST_ERR_FORMAT, "%s: the file changed while it was read (now %lld bytes, "
                    "was %llu)", path, (long long)sb.st_size, (unsigned long long)s->file_size);
  }
  return ST_OK;
}

st_status st__safetensors_read_tensor(const char *path, const st_safetensors *s, int i,
                                      float *dst) {
  ST_ASSERT(path && s && s->offsets && i >= 0 && i < s->n && dst);
  int fd;
  st_status st = reopen(path, s, &fd);
  if (st != ST_OK) return st;
  st = read_exact(fd, path, dst, (size_t)tensor_count(&s->tensors[i]) * sizeof(float),
                  s->offsets[i]);
  close(fd);
  return st;
}

typedef struct at_offset {
  uint64_t offset;
  int i;
} at_offset;

static int cmp_offset(const void *a, const void *b) {
  uint64_t x = ((const at_offset *)a)->offset, y = ((const at_offset *)b)->offset;
  return (x > y) - (x < y);
}

/* Tensor order by file offset (the header's order need not be the data's). */
static int *by_offset(const st_safetensors *s) {
  at_offset *a = malloc(sizeof *a * (size_t)(s->n ? s->n : 1));
  int *order = malloc(sizeof(int) * (size_t)(s->n ? s->n : 1));
  for (int i = 0; a && order && i < s->n; i++) a[i] = (at_offset){s->offsets[i], i};
  if (a && order) qsort(a, (size_t)s->n, sizeof *a, cmp_offset);
  for (int i = 0; a && order && i < s->n; i++) order[i] = a[i].i;
  if (!a) free(order), order = NULL;
  free(a);
  return order;
}

st_status st__safetensors_checksums(const char *path, const st_safetensors *s,
                                    uint32_t *file_crc, uint32_t *tensor_crc) {
  ST_ASSERT(path && s && s->offsets && file_crc && (s->n == 0 || tensor_crc));
  enum { CHUNK = 1 << 20 };
  int fd, *order = by_offset(s);
  unsigned char *buf = malloc(CHUNK);
  st_status st = order && buf ? reopen(path, s, &fd)
                              : st_error(ST_ERR_NOMEM, "%s: checksum buffers", path);
  if (st != ST_OK) {
    free(order), free(buf);
    return st;
  }
  *file_crc = 0;
  for (int i = 0; i < s->n; i++) tensor_crc[i] = 0;
  int j = 0; /* the tensor (in offset order) the next data byte belongs to */
  for (uint64_t pos = 0; st == ST_OK && pos < s->file_size;) {
    size_t n = s->file_size - pos < CHUNK ? (size_t)(s->file_size - pos) : CHUNK;
    if ((st = read_exact(fd, path, buf, n, pos)) != ST_OK) break;
    *file_crc = st_crc32c(*file_crc, buf, n);
    for (uint64_t at = pos > s->data_start ? pos : s->data_start; at < pos + n && j < s->n;) {
      int t = order[j];
      uint64_t end = s->offsets[t] + tensor_count(&s->tensors[t]) * sizeof(float);
      uint64_t stop = end < pos + n ? end : pos + n;
      tensor_crc[t] = st_crc32c(tensor_crc[t], buf + (at - pos), (size_t)(stop - at));
      at = stop;
      if (at == end) j++;
    }
    pos += n;
  }
  close(fd);
  free(order), free(buf);
  return st;
}

const st_named_tensor *st__safetensors_find(const st_safetensors *s,
                                            const char *name) {
  for (int i = 0; s && i < s->n; i++)
    if (strcmp(s->tensors[i].name, name) == 0) return &s->tensors[i];
  return NULL;
}

void st__safetensors_free(st_safetensors *s) {
  if (!s) return;
  st_free(s->tensors);
  st_free(s->blob);
  st_free(s->offsets);
  memset(s, 0, sizeof *s);
}
