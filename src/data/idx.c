/* IDX files (the MNIST format): reading and writing, plain or gzip, plus the
 * loader for a directory of the four MNIST-style files. A file is a 4-byte
 * magic (0x00 0x00 type rank), rank big-endian u32 dimensions and the payload
 * (u8, or big-endian i32 / f32). The reader validates the header before it
 * allocates anything: for a plain file the payload size must equal the file
 * size minus the header; for gzip (where the real size is only known by
 * inflating) the buffer grows as data actually arrives, so a forged header
 * cannot force a large allocation. Payloads are converted to host byte order;
 * NaN/Inf floats are rejected unless st_idx_options.allow_nonfinite is set.
 * Writing replaces the target atomically (st__atomic_open/commit,
 * base/fileio.h).
 * Every error names the file and byte offset. */
#define _POSIX_C_SOURCE 200809L
#include "base/args.h"
#include "strata/data.h"
#include "base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAX_RANK 4
#define IDX_MAX_BYTES ((uint64_t)1 << 40)
#define IDX_CHUNK ((size_t)1 << 20) /* first gzip buffer and read granularity */

typedef struct idx_header {
  st_dtype dtype;
  int rank;
  int64_t dims[IDX_MAX_RANK];
  size_t bytes;  /* payload size */
  size_t offset; /* header size = payload start */
} idx_header;

/* An open input: plain or gzip through zlib; pos counts uncompressed bytes. */
typedef struct idx_reader {
  const char *path;
  gzFile gz;
  bool gzip;
  uint64_t pos;
  uint64_t file_size; /* on disk */
} idx_reader;

static int type_code(st_dtype t) {
  return t == ST_U8 ? 0x08 : t == ST_I32 ? 0x0C : t == ST_F32 ? 0x0D : -1;
}

static bool host_is_little(void) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return false;
#else
  return true;
#endif
}

static uint32_t load_be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void store_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* ---- reading ------------------------------------------------------------ */

static st_status rd_open(idx_reader *r, const char *path) {
  memset(r, 0, sizeof *r);
  r->path = path;
  int fd = -1;
  struct stat sb;
  st_status s = st__open_input(path, &fd, &sb); /* never blocks on a FIFO */
  if (s != ST_OK) return s;
  r->file_size = (uint64_t)sb.st_size;
  r->gz = gzdopen(fd, "rb");
  if (!r->gz) {
    close(fd);
    return st_error(ST_ERR_NOMEM, "%s: cannot start zlib reader", path);
  }
  gzbuffer(r->gz, 1u << 17);
  return ST_OK;
}

/* Read up to n bytes; *got < n only at the end of the data. */
static st_status rd_read(idx_reader *r, void *buf, size_t n, size_t *got) {
  *got = 0;
  while (*got < n) {
    size_t want = n - *got > IDX_CHUNK ? IDX_CHUNK : n - *got;
    int k = gzread(r->gz, (char *)buf + *got, (unsigned)want);
    if (k < 0) {
      int err = 0;
      const char *msg = gzerror(r->gz, &err);
      if (err == Z_ERRNO)
        return st_error(ST_ERR_IO, "%s: offset %llu: read failed: %s", r->path,
                        (unsigned long long)r->pos, strerror(errno));
      const char *colon = strncmp(msg, "<fd:", 4) == 0 ? strstr(msg, ": ") : NULL;
      return st_error(ST_ERR_FORMAT, "%s: offset %llu (uncompressed): corrupt gzip data: %s",
                      r->path, (unsigned long long)r->pos, colon ? colon + 2 : msg);
    }
    if (k == 0) break;
    *got += (size_t)k;
    r->pos += (uint64_t)k;
  }
  return ST_OK;
}

/* Read exactly n header bytes at the current position. */
static st_status rd_header_bytes(idx_reader *r, unsigned char *buf, size_t n,
                                 const char *what) {
  uint64_t at = r->pos;
  size_t got;
  st_status s = rd_read(r, buf, n, &got);
  if (s != ST_OK) return s;
  if (got < n)
    return st_error(ST_ERR_FORMAT, "%s: offset %llu: truncated: file ends at offset %llu inside %s",
                    r->path, (unsigned long long)at, (unsigned long long)r->pos, what);
  return ST_OK;
}

static st_status parse_magic(const char *path, const unsigned char m[4], idx_header *h) {
  uint32_t magic = load_be32(m);
  if (m[0] != 0 || m[1] != 0)
    return st_error(ST_ERR_FORMAT,
                    "%s: offset 0: bad magic 0x%08x (expected 0x0000TTRR: two zero bytes, "
                    "type code, rank; e.g. 0x00000803 for unsigned bytes of rank 3)",
                    path, magic);
  if (m[2] == 0x08) h->dtype = ST_U8;
  else if (m[2] == 0x0C) h->dtype = ST_I32;
  else if (m[2] == 0x0D) h->dtype = ST_F32;
  else
    return st_error(ST_ERR_FORMAT,
                    "%s: offset 2: unsupported type code 0x%02x in magic 0x%08x "
                    "(expected 0x08 u8, 0x0C i32 or 0x0D f32)", path, m[2], magic);
  if (m[3] < 1 || m[3] > IDX_MAX_RANK)
    return st_error(ST_ERR_FORMAT, "%s: offset 3: rank %d out of range 1..%d (magic 0x%08x)",
                    path, m[3], IDX_MAX_RANK, magic);
  h->rank = m[3];
  h->offset = 4 + 4 * (size_t)h->rank;
  return ST_OK;
}

/* Dims are known; compute the payload size, rejecting overflow and absurd sizes. */
static st_status check_size(const char *path, idx_header *h) {
  size_t n = st_dtype_size(h->dtype);
  char list[80] = "";
  size_t used = 0;
  bool over = false;
  for (int i = 0; i < h->rank; i++) {
    int w = snprintf(list + used, sizeof list - used, "%s%lld", i ? " x " : "",
                     (long long)h->dims[i]);
    if (w > 0 && used + (size_t)w < sizeof list) used += (size_t)w;
    if (!st_mul_size(n, (size_t)h->dims[i], &n)) over = true;
  }
  if (over)
    return st_error(ST_ERR_FORMAT, "%s: offset 4: dimensions %s (%s) overflow size_t",
                    path, list, st_dtype_name(h->dtype));
  if ((uint64_t)n >= IDX_MAX_BYTES)
    return st_error(ST_ERR_FORMAT,
                    "%s: offset 4: dimensions %s (%s) claim %zu bytes, over the 2^40-byte limit",
                    path, list, st_dtype_name(h->dtype), n);
  h->bytes = n;
  return ST_OK;
}

static st_status read_header(idx_reader *r, idx_header *h) {
  unsigned char m[4], d[4 * IDX_MAX_RANK];
  memset(h, 0, sizeof *h);
  st_status s = rd_header_bytes(r, m, 4, "the 4-byte magic");
  if (s != ST_OK) return s;
  r->gzip = !gzdirect(r->gz);
  if ((s = parse_magic(r->path, m, h)) != ST_OK) return s;
  if ((s = rd_header_bytes(r, d, 4 * (size_t)h->rank, "the dimensions")) != ST_OK) return s;
  for (int i = 0; i < h->rank; i++) {
    h->dims[i] = load_be32(d + 4 * i);
    if (h->dims[i] == 0)
      return st_error(ST_ERR_FORMAT, "%s: offset %d: dimension %d is 0", r->path, 4 + 4 * i, i);
  }
  return check_size(r->path, h);
}

static st_status truncated(const idx_reader *r, const idx_header *h) {
  int err = Z_OK;
  if (r->gzip) gzerror(r->gz, &err);
  return st_error(ST_ERR_FORMAT,
                  "%s: truncated: expected %zu bytes of payload after offset %zu, "
                  "file ends at offset %llu%s",
                  r->path, h->bytes, h->offset, (unsigned long long)r->pos,
                  !r->gzip ? "" : err == Z_BUF_ERROR ? " (uncompressed; gzip stream cut short)"
                                                     : " (uncompressed)");
}

/* Plain file: the size on disk must match the header before we allocate. */
static st_status check_plain_size(idx_reader *r, const idx_header *h) {
  uint64_t want = (uint64_t)h->offset + h->bytes;
  if (r->file_size < want)
    return st_error(ST_ERR_FORMAT,
                    "%s: truncated: expected %zu bytes of payload after offset %zu, "
                    "file ends at offset %llu", r->path, h->bytes, h->offset,
                    (unsigned long long)r->file_size);
  if (r->file_size > want)
    return st_error(ST_ERR_FORMAT,
                    "%s: trailing data after offset %llu (%llu extra bytes; the header "
                    "says %zu bytes of payload)", r->path, (unsigned long long)want,
                    (unsigned long long)(r->file_size - want), h->bytes);
  return ST_OK;
}

/* Replace *buf (holding `used` bytes) with a buffer of `cap` bytes. */
static st_status grow(void **buf, size_t used, size_t cap) {
  void *nb = st_alloc(cap);
  if (!nb) return ST_ERR_NOMEM;
  if (used) memcpy(nb, *buf, used);
  st_free(*buf);
  *buf = nb;
  return ST_OK;
}

/* Read the payload, growing the buffer only as data arrives (gzip) or at once
 * (plain, size already checked). Then make sure nothing follows it. */
static st_status read_payload(idx_reader *r, const idx_header *h, void **out) {
  size_t cap = r->gzip && h->bytes > IDX_CHUNK ? IDX_CHUNK : h->bytes, used = 0;
  void *buf = NULL;
  st_status s = grow(&buf, 0, cap);
  while (s == ST_OK && used < h->bytes) {
    if (used == cap) {
      cap = h->bytes / 2 < cap ? h->bytes : cap * 2;
      if ((s = grow(&buf, used, cap)) != ST_OK) break;
    }
    size_t want = cap - used, got;
    if ((s = rd_read(r, (char *)buf + used, want, &got)) != ST_OK) break;
    used += got;
    if (got < want) s = truncated(r, h);
  }
  unsigned char extra;
  size_t got = 0;
  if (s == ST_OK) s = rd_read(r, &extra, 1, &got);
  if (s == ST_OK && got)
    s = st_error(ST_ERR_FORMAT, "%s: trailing data after offset %llu%s (the header says %zu "
                 "bytes of payload)", r->path, (unsigned long long)(r->pos - 1),
                 r->gzip ? " (uncompressed)" : "", h->bytes);
  if (s != ST_OK) {
    st_free(buf);
    return s;
  }
  *out = buf;
  return ST_OK;
}

/* Big-endian i32/f32 to host order; floats must be finite unless allowed. */
static st_status to_host(const char *path, const idx_header *h, bool allow_nonfinite,
                         void *data) {
  if (h->dtype == ST_U8) return ST_OK;
  size_t n = h->bytes / 4;
  uint32_t *w = data;
  if (host_is_little())
    for (size_t i = 0; i < n; i++) w[i] = __builtin_bswap32(w[i]);
  if (h->dtype != ST_F32 || allow_nonfinite) return ST_OK;
  const float *f = data;
  for (size_t i = 0; i < n; i++)
    if (!isfinite(f[i]))
      return st_error(ST_ERR_NONFINITE, "%s: offset %zu: element %zu is %s (non-finite values "
                      "are rejected by default)", path, h->offset + 4 * i, i,
                      isnan(f[i]) ? "NaN" : "Inf");
  return ST_OK;
}

st_status st_idx_read(const char *path, st_tensor *out) {
  ST_REQUIRE(path);
  ST_REQUIRE(out);
  return st_idx_read_ex(path, NULL, out);
}

st_status st_idx_read_ex(const char *path, const st_idx_options *o, st_tensor *out) {
  ST_REQUIRE(path);
  ST_REQUIRE(out);
  bool allow_nonfinite = o && o->allow_nonfinite;
  memset(out, 0, sizeof *out);
  idx_reader r;
  idx_header h;
  void *data = NULL;
  st_status s = rd_open(&r, path);
  if (s != ST_OK) return s;
  s = read_header(&r, &h);
  if (s == ST_OK && !r.gzip) s = check_plain_size(&r, &h);
  if (s == ST_OK) s = read_payload(&r, &h, &data);
  gzclose(r.gz);
  if (s == ST_OK) s = to_host(path, &h, allow_nonfinite, data);
  if (s != ST_OK) {
    st_free(data);
    return s;
  }
  out->dtype = h.dtype;
  out->rank = h.rank;
  for (int i = 0; i < h.rank; i++) out->dims[i] = h.dims[i];
  out->data = data;
  return ST_OK;
}

/* ---- writing ------------------------------------------------------------ */

/* Output to a temp file: plain writes on fd, or gzip through a dup of fd. */
typedef struct idx_writer {
  const char *path; /* final name, for messages */
  int fd;
  gzFile gz;
} idx_writer;

static st_status wr_write(idx_writer *w, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    size_t k = n > IDX_CHUNK ? IDX_CHUNK : n;
    if (w->gz) {
      if (gzwrite(w->gz, p, (unsigned)k) != (int)k) {
        int err = 0;
        const char *msg = gzerror(w->gz, &err);
        return st_error(ST_ERR_IO, "%s: gzip write failed: %s", w->path,
                        err == Z_ERRNO ? strerror(errno) : msg);
      }
    } else {
      ssize_t m = write(w->fd, p, k);
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) return st_error(ST_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
      k = (size_t)m;
    }
    p += k;
    n -= k;
  }
  return ST_OK;
}

static st_status check_writable(const char *path, const st_tensor *t) {
  if (type_code(t->dtype) < 0)
    return st_error(ST_ERR_INVALID, "%s: cannot write dtype %d as IDX", path, (int)t->dtype);
  if (t->rank < 1 || t->rank > IDX_MAX_RANK)
    return st_error(ST_ERR_INVALID, "%s: rank %d out of range 1..%d for IDX", path, t->rank,
                    IDX_MAX_RANK);
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 1 || t->dims[i] > (int64_t)UINT32_MAX)
      return st_error(ST_ERR_INVALID, "%s: dimension %d = %lld out of range 1..2^32-1", path,
                      i, (long long)t->dims[i]);
  if (!t->data) return st_error(ST_ERR_INVALID, "%s: tensor has no data", path);
  return ST_OK;
}

/* Header, then the payload (big-endian words converted in 64 KiB pieces). */
static st_status write_body(idx_writer *w, const st_tensor *t) {
  unsigned char hdr[4 + 4 * IDX_MAX_RANK] = {0, 0, (unsigned char)type_code(t->dtype),
                                             (unsigned char)t->rank};
  for (int i = 0; i < t->rank; i++) store_be32(hdr + 4 + 4 * i, (uint32_t)t->dims[i]);
  st_status s = wr_write(w, hdr, 4 + 4 * (size_t)t->rank);
  size_t n = st_tensor_count(t);
  if (s != ST_OK || t->dtype == ST_U8) return s != ST_OK ? s : wr_write(w, t->data, n);
  enum { PIECE = 16384 };
  unsigned char *tmp = st_alloc(4 * PIECE);
  if (!tmp) return ST_ERR_NOMEM;
  const uint32_t *src = t->data;
  for (size_t i = 0; s == ST_OK && i < n; i += PIECE) {
    size_t k = n - i < PIECE ? n - i : PIECE;
    for (size_t j = 0; j < k; j++) store_be32(tmp + 4 * j, src[i + j]);
    s = wr_write(w, tmp, 4 * k);
  }
  st_free(tmp);
  return s;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static st_status write_file(idx_writer *w, const st_tensor *t, bool gzip) {
  st_status s = ST_OK;
  if (gzip) {
    int fd2 = dup(w->fd);
    w->gz = fd2 >= 0 ? gzdopen(fd2, "wb6") : NULL;
    if (!w->gz) {
      if (fd2 >= 0) close(fd2);
      return st_error(ST_ERR_IO, "%s: cannot start gzip writer", w->path);
    }
  }
  s = write_body(w, t);
  if (w->gz) {
    int rc = gzclose(w->gz);
    w->gz = NULL;
    if (s == ST_OK && rc != Z_OK)
      s = st_error(ST_ERR_IO, "%s: gzip close failed (zlib code %d): %s", w->path, rc,
                   strerror(errno));
  }
  return s;
}

st_status st_idx_write(const char *path, const st_tensor *t) {
  ST_REQUIRE(path);
  ST_REQUIRE(t);
  st_status s = check_writable(path, t);
  if (s != ST_OK) return s;
  st__atomic_file a; /* fd writes only: a.f's buffer stays empty */
  if ((s = st__atomic_open(&a, path)) != ST_OK) return s;
  idx_writer w = {path, fileno(a.f), NULL};
  s = write_file(&w, t, ends_with(path, ".gz"));
  if (s != ST_OK) st__atomic_abort(&a);
  else s = st__atomic_commit(&a, 0);
  return s;
}

/* ---- MNIST directories ------------------------------------------------- */

/* dir/name, or dir/name.gz when only that exists (plain preferred). */
static st_status mnist_read(const char *dir, const char *name, const st_idx_options *o,
                            st_tensor *t, char *path, size_t cap) {
  struct stat sb;
  int n = snprintf(path, cap, "%s/%s", dir, name);
  if (n < 0 || (size_t)n + 4 > cap)
    return st_error(ST_ERR_INVALID, "%s/%s: path too long", dir, name);
  if (stat(path, &sb) != 0 && errno == ENOENT) {
    strcat(path, ".gz");
    if (stat(path, &sb) != 0 && errno == ENOENT) {
      path[n] = '\0';
      return st_error(ST_ERR_IO, "%s: not found (also tried %s.gz)", path, path);
    }
  } /* another reason (Permission denied) is reported by the open as it is */
  return st_idx_read_ex(path, o, t);
}

static st_status mnist_pair(const char *dir, const char *img, const char *lab,
                            const st_idx_options *o, st_tensor *x, st_tensor *y) {
  char px[PATH_MAX], py[PATH_MAX];
  st_status s = mnist_read(dir, img, o, x, px, sizeof px);
  if (s == ST_OK) s = mnist_read(dir, lab, o, y, py, sizeof py);
  if (s != ST_OK) return s;
  if ((x->dtype != ST_U8 && x->dtype != ST_F32) || x->rank != 3)
    return st_error(ST_ERR_FORMAT, "%s: images must be uint8 or float32 of rank 3, got %s of "
                    "rank %d", px, st_dtype_name(x->dtype), x->rank);
  if (y->dtype != ST_U8 || y->rank != 1)
    return st_error(ST_ERR_FORMAT, "%s: labels must be uint8 of rank 1, got %s of rank %d",
                    py, st_dtype_name(y->dtype), y->rank);
  if (x->dims[0] != y->dims[0])
    return st_error(ST_ERR_FORMAT, "%s has %lld images but %s has %lld labels", px,
                    (long long)x->dims[0], py, (long long)y->dims[0]);
  return ST_OK;
}

st_status st_mnist_load(const char *dir, st_mnist *out) {
  ST_REQUIRE(dir);
  ST_REQUIRE(out);
  return st_mnist_load_ex(dir, NULL, out);
}

st_status st_mnist_load_ex(const char *dir, const st_idx_options *o, st_mnist *out) {
  ST_REQUIRE(dir);
  ST_REQUIRE(out);
  memset(out, 0, sizeof *out);
  st_status s = mnist_pair(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", o,
                           &out->train_x, &out->train_y);
  if (s == ST_OK)
    s = mnist_pair(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", o, &out->test_x,
                   &out->test_y);
  if (s != ST_OK) st_mnist_destroy(out);
  return s;
}

void st_mnist_destroy(st_mnist *m) {
  if (!m) return;
  st_tensor_destroy(&m->train_x);
  st_tensor_destroy(&m->train_y);
  st_tensor_destroy(&m->test_x);
  st_tensor_destroy(&m->test_y);
}
