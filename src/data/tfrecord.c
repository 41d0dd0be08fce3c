/* TFRecord framing: the streaming reader and the writer (plain or gzip).
 * A record on disk: uint64 length (little endian), masked CRC32C of those 8
 * bytes, the payload, masked CRC32C of the payload. The reader holds one
 * input buffer (buffer_size bytes; compressed bytes for gzip, plus zlib's
 * inflate state) and one record buffer that grows to the longest record read,
 * never past max_record_bytes, so a damaged length field cannot make it
 * allocate more. Offsets in messages count bytes of the uncompressed stream.
 * gzip: every member of the file is decoded (concatenated .gz files read
 * whole); bytes after a member that do not start another one are damage.
 * Readers of a dataset (st__tfrecord_reader_pool) also reserve each record
 * larger than POOL_SMALL, with its decode budget, from one process-wide pool
 * of POOL_BYTES, so parallel readers together stay within it. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "base/args.h"
#include "base/fileio.h"
#include "data/tfrecord_ds.h"
#include "strata/data.h"

#define DEFAULT_BUFFER (256u << 10)
#define DEFAULT_MAX_RECORD (64u << 20)
#define HEADER_BYTES 12
#define MAX_RECORD_LIMIT ((size_t)1 << 40)
#define SKIP_HINT " (damaged TFRecord file; --skip-corrupt-records / skip_corrupt skips the rest of it)"
#define POOL_SMALL ((size_t)1 << 20)
#define POOL_BYTES ((size_t)2 * DEFAULT_MAX_RECORD + ((size_t)1 << 20))

/* The pool: a reservation waits while others hold it and it does not fit. A
 * thread holds at most one (released before its next record and on every
 * error), and holders never wait, so every wait ends. */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static size_t pool_used;

static void pool_take(size_t n) {
  pthread_mutex_lock(&pool_mu);
  while (pool_used > 0 && pool_used + n > POOL_BYTES) pthread_cond_wait(&pool_cv, &pool_mu);
  pool_used += n;
  pthread_mutex_unlock(&pool_mu);
}

static void pool_give(size_t n) {
  pthread_mutex_lock(&pool_mu);
  pool_used -= n;
  pthread_cond_broadcast(&pool_cv);
  pthread_mutex_unlock(&pool_mu);
}

st_tfrecord_options st_tfrecord_default_options(void) {
  return (st_tfrecord_options){ST_COMPRESSION_NONE, DEFAULT_BUFFER, DEFAULT_MAX_RECORD, false};
}

st_status st_compression_parse(const char *name, st_compression *out) {
  ST_REQUIRE(name);
  ST_REQUIRE(out);
  if (!*name || !strcmp(name, "none") || !strcmp(name, "NONE")) *out = ST_COMPRESSION_NONE;
  else if (!strcmp(name, "gzip") || !strcmp(name, "GZIP")) *out = ST_COMPRESSION_GZIP;
  else
    return st_error(ST_ERR_INVALID, "compression: unknown '%s' (\"\"/none or GZIP)", name);
  return ST_OK;
}

static uint64_t load_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint32_t load_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void store_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t masked_crc(const void *p, size_t n) { return st_crc32c_mask(st_crc32c(0, p, n)); }

/* ---- reader ------------------------------------------------------------------ */
struct st_tfrecord_reader {
  char *path;
  st_tfrecord_options o;
  int fd;            /* the file */
  bool gz;           /* gzip: z inflates from in */
  z_stream z;
  bool z_ready, member_end, file_eof;
  int members;       /* gzip members begun */
  uint64_t comp_read; /* gzip: bytes read from the file */
  uint64_t member_at; /* gzip: where the current member starts in the file */
  uint8_t *in;       /* [o.buffer_size] bytes read ahead */
  size_t in_pos, in_len;
  bool pooled;       /* reserve large records from the pool */
  size_t held;       /* bytes reserved for the current record */
  uint8_t *rec;      /* [rec_cap] the current record's payload */
  size_t rec_cap;
  uint64_t offset;   /* bytes of the stream consumed */
  int64_t skipped;
  bool done;         /* end reached (or the rest of the file skipped) */
};

static st_status fill_in(st_tfrecord_reader *r, uint64_t at, ssize_t *rd) {
  do *rd = read(r->fd, r->in, r->o.buffer_size);
  while (*rd < 0 && errno == EINTR);
  if (*rd < 0)
    return st_error(ST_ERR_IO, "%s: offset %llu: read failed: %s", r->path,
                    (unsigned long long)at, strerror(errno));
  return ST_OK;
}

static st_status gz_damaged(st_tfrecord_reader *r, uint64_t at, const char *what) {
  unsigned long long c = (unsigned long long)(r->comp_read - r->z.avail_in);
  if (r->z.total_out == 0 && strstr(what, "header")) /* not the start of a member */
    return st_error(ST_ERR_FORMAT, "%s: offset %llu: gzip stream damaged at compressed byte %llu: "
                    "%s%.0d is not a gzip member (%s)%s", r->path, (unsigned long long)at,
                    (unsigned long long)r->member_at, r->members > 1 ? "what follows gzip member "
                    : "the file", r->members > 1 ? r->members - 1 : 0, what, SKIP_HINT);
  return st_error(ST_ERR_FORMAT, "%s: offset %llu: gzip stream damaged at compressed byte %llu "
                  "(gzip member %d): %s%s", r->path, (unsigned long long)at, c, r->members, what,
                  SKIP_HINT);
}

/* gzip: up to want bytes (>0) inflated into dst (NULL: discarded) as *k; 0
 * only at the end of the file. Every member is decoded. */
static st_status gz_read(st_tfrecord_reader *r, uint8_t *dst, size_t want, uint64_t at,
                         size_t *k) {
  uint8_t sink[4096];
  *k = 0;
  for (;;) {
    if (r->z.avail_in == 0 && !r->file_eof) {
      ssize_t rd;
      st_status s = fill_in(r, at, &rd);
      if (s != ST_OK) return s;
      r->file_eof = rd == 0;
      r->z.next_in = r->in;
      r->z.avail_in = (uInt)rd;
      r->comp_read += (uint64_t)rd;
    }
    if (r->member_end || r->members == 0) {
      if (r->z.avail_in == 0) {
        if (r->file_eof) return ST_OK; /* the end (or an empty file) */
        continue;
      }
      if (r->members++ > 0) inflateReset(&r->z);
      r->member_at = r->comp_read - r->z.avail_in;
      r->member_end = false;
    }
    if (r->z.avail_in == 0 && r->file_eof)
      return gz_damaged(r, at, "truncated: the file ends inside the member");
    size_t chunk = want > (1u << 30) ? 1u << 30 : want;
    if (!dst && chunk > sizeof sink) chunk = sizeof sink;
    r->z.next_out = dst ? dst : sink;
    r->z.avail_out = (uInt)chunk;
    int zr = inflate(&r->z, Z_NO_FLUSH);
    *k = chunk - r->z.avail_out;
    if (zr == Z_STREAM_END) r->member_end = true;
    else if (zr != Z_OK && zr != Z_BUF_ERROR)
      return gz_damaged(r, at, r->z.msg ? r->z.msg : zr == Z_NEED_DICT ? "needs a dictionary"
                                                                         : "zlib error");
    if (*k) return ST_OK;
  }
}

/* Up to n bytes of the stream into dst (dst NULL: discard); *got < n only at
 * the end. */
static st_status stream_read(st_tfrecord_reader *r, void *dst, size_t n, size_t *got) {
  *got = 0;
  while (*got < n) {
    size_t want = n - *got, k;
    if (r->gz) {
      st_status s = gz_read(r, dst ? (uint8_t *)dst + *got : NULL, want, r->offset + *got, &k);
      if (s != ST_OK) return s;
      if (k == 0) return ST_OK;
    } else {
      if (r->in_pos == r->in_len) {
        ssize_t rd;
        st_status s = fill_in(r, r->offset + *got, &rd);
        if (s != ST_OK) return s;
        if (rd == 0) return ST_OK;
        r->in_pos = 0;
        r->in_len = (size_t)rd;
      }
      k = r->in_len - r->in_pos < want ? r->in_len - r->in_pos : want;
      if (dst) memcpy((uint8_t *)dst + *got, r->in + r->in_pos, k);
      r->in_pos += k;
    }
    *got += k;
  }
  return ST_OK;
}

st_status st_tfrecord_reader_create(const char *path, const st_tfrecord_options *o,
                                    st_tfrecord_reader **out) {
  ST_REQUIRE(path);
  ST_REQUIRE(out);
  *out = NULL;
  st_tfrecord_options opt = o ? *o : st_tfrecord_default_options();
  if (opt.compression < 0 || opt.compression >= ST_COMPRESSION_COUNT)
    return st_error(ST_ERR_INVALID, "%s: compression %d out of range", path, (int)opt.compression);
  if (!opt.buffer_size) opt.buffer_size = DEFAULT_BUFFER;
  if (!opt.max_record_bytes) opt.max_record_bytes = DEFAULT_MAX_RECORD;
  if (opt.max_record_bytes > MAX_RECORD_LIMIT || opt.buffer_size > MAX_RECORD_LIMIT)
    return st_error(ST_ERR_INVALID, "%s: max_record_bytes %zu / buffer_size %zu: at most 2^40",
                    path, opt.max_record_bytes, opt.buffer_size);
  st_tfrecord_reader *r = calloc(1, sizeof *r);
  if (!r || !(r->path = strdup(path))) goto fail_nomem;
  r->o = opt;
  r->fd = -1;
  st_status s = st__open_input(path, &r->fd, NULL);
  if (s != ST_OK) goto fail;
  if (opt.buffer_size > (1u << 30)) r->o.buffer_size = 1u << 30; /* read() and uInt */
  if (!(r->in = malloc(r->o.buffer_size))) goto fail_nomem;
  if (opt.compression == ST_COMPRESSION_GZIP) {
    r->gz = true;
    if (inflateInit2(&r->z, 16 + MAX_WBITS) != Z_OK) goto fail_nomem; /* gzip only */
    r->z_ready = true;
  }
  *out = r;
  return ST_OK;
fail_nomem:
  s = st_error(ST_ERR_NOMEM, "%s: out of memory for a TFRecord reader", path);
fail:
  st_tfrecord_reader_destroy(r);
  return s;
}

void st__tfrecord_reader_pool(st_tfrecord_reader *r) {
  if (r) r->pooled = true;
}

void st__tfrecord_reader_release(st_tfrecord_reader *r) {
  if (!r || !r->held) return;
  munmap(r->rec, r->rec_cap); /* a reserved record is mapped: its pages go back */
  r->rec = NULL;
  r->rec_cap = 0;
  pool_give(r->held);
  r->held = 0;
}

void st_tfrecord_reader_destroy(st_tfrecord_reader *r) {
  if (!r) return;
  st__tfrecord_reader_release(r);
  if (r->z_ready) inflateEnd(&r->z);
  if (r->fd >= 0) close(r->fd);
  free(r->in);
  free(r->rec);
  free(r->path);
  free(r);
}

int64_t st_tfrecord_reader_skipped(const st_tfrecord_reader *r) { return r ? r->skipped : 0; }
uint64_t st_tfrecord_reader_offset(const st_tfrecord_reader *r) { return r ? r->offset : 0; }

/* A damaged record at offset at: the error, or (skip_corrupt) counted, with
 * the rest of the file given up when rest is true. *skipped tells which. */
static st_status damaged(st_tfrecord_reader *r, bool rest, bool *skipped, const char *fmt,
                         unsigned long long at, unsigned long long a, unsigned long long b) {
  char what[256];
  snprintf(what, sizeof what, fmt, a, b);
  if (!r->o.skip_corrupt)
    return st_error(ST_ERR_FORMAT, "%s: offset %llu: %s (damaged TFRecord file; "
                    "--skip-corrupt-records / skip_corrupt skips such records)", r->path, at, what);
  r->skipped++;
  if (rest) r->done = true;
  *skipped = true;
  return ST_OK;
}

/* Room for n payload bytes + the 4-byte footer (n <= max_record_bytes). */
static st_status reserve(st_tfrecord_reader *r, size_t n) {
  size_t need = n + 4 + st__example_decode_budget(n, r->o.max_record_bytes);
  if (r->pooled && need > POOL_SMALL) { /* unmapped by st__tfrecord_reader_release */
    pool_take(need);
    void *p = mmap(NULL, n + 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      pool_give(need);
      return st_error(ST_ERR_NOMEM, "%s: out of memory for a record of %zu bytes", r->path, n);
    }
    free(r->rec);
    r->rec = p;
    r->rec_cap = n + 4;
    r->held = need;
    return ST_OK;
  }
  if (n + 4 <= r->rec_cap) return ST_OK;
  size_t cap = r->rec_cap ? r->rec_cap : 4096;
  while (cap < n + 4) cap *= 2;
  if (cap > r->o.max_record_bytes + 4) cap = r->o.max_record_bytes + 4;
  uint8_t *p = realloc(r->rec, cap);
  if (!p) return st_error(ST_ERR_NOMEM, "%s: out of memory for a record of %zu bytes", r->path, n);
  r->rec = p;
  r->rec_cap = cap;
  return ST_OK;
}

/* One attempt: a record in r->rec (*size), end, or a skipped damaged one. */
static st_status read_one(st_tfrecord_reader *r, size_t *size, bool *end, bool *skipped) {
  st__tfrecord_reader_release(r);
  uint8_t h[HEADER_BYTES];
  size_t got;
  unsigned long long at = r->offset;
  st_status s = stream_read(r, h, sizeof h, &got);
  if (s != ST_OK) return s;
  r->offset += got;
  if (got == 0) return *end = true, ST_OK;
  if (got < sizeof h)
    return damaged(r, true, skipped, "truncated record header: %llu of %llu bytes", at, got,
                   sizeof h);
  uint64_t len = load_le64(h);
  if (masked_crc(h, 8) != load_le32(h + 8) && at == 0 && !r->gz && h[0] == 0x1f && h[1] == 0x8b)
    return damaged(r, true, skipped, "length field CRC mismatch: the file looks gzip-compressed "
                   "(read it with compression GZIP)", at, 0, 0);
  if (masked_crc(h, 8) != load_le32(h + 8))
    return damaged(r, true, skipped, "length field CRC mismatch (length field reads %llu, "
                   "stored CRC 0x%08llx)", at, (unsigned long long)len, load_le32(h + 8));
  if (len > r->o.max_record_bytes) {
    if (!r->o.skip_corrupt)
      return st_error(ST_ERR_FORMAT, "%s: offset %llu: record length %llu exceeds the limit of "
                      "%zu bytes (max_record_bytes; refused rather than allocated)", r->path, at,
                      (unsigned long long)len, r->o.max_record_bytes);
    uint64_t left = len + 4;
    while (left > 0) { /* a long record with a valid length: step over it */
      size_t chunk = left > (1u << 20) ? 1u << 20 : (size_t)left;
      if ((s = stream_read(r, NULL, chunk, &got)) != ST_OK) return s;
      r->offset += got;
      if (got < chunk) break;
      left -= chunk;
    }
    r->skipped++;
    if (left > 0) r->done = true;
    return *skipped = true, ST_OK;
  }
  if ((s = reserve(r, (size_t)len)) != ST_OK) return s;
  if ((s = stream_read(r, r->rec, (size_t)len + 4, &got)) != ST_OK) return s;
  r->offset += got;
  if (got < len + 4)
    return damaged(r, true, skipped, "truncated record: %llu of %llu payload and CRC bytes",
                   at, got, (unsigned long long)len + 4);
  if (masked_crc(r->rec, (size_t)len) != load_le32(r->rec + len))
    return damaged(r, false, skipped, "payload CRC mismatch in a record of %llu bytes", at,
                   (unsigned long long)len, 0);
  *size = (size_t)len;
  return ST_OK;
}

st_status st_tfrecord_reader_next(st_tfrecord_reader *r, const void **data, size_t *size,
                                  bool *end) {
  ST_REQUIRE(r);
  ST_REQUIRE(data);
  ST_REQUIRE(size);
  ST_REQUIRE(end);
  *end = false;
  for (;;) {
    if (r->done) return *end = true, ST_OK;
    bool skipped = false;
    st_status s = read_one(r, size, end, &skipped);
    if (s != ST_OK || *end || skipped) st__tfrecord_reader_release(r);
    if (s == ST_ERR_FORMAT && r->o.skip_corrupt) { /* a damaged gzip stream */
      r->skipped++;
      r->done = true;
      continue;
    }
    if (s != ST_OK) return s;
    if (*end) {
      r->done = true;
      return ST_OK;
    }
    if (!skipped) {
      *data = r->rec;
      return ST_OK;
    }
  }
}

/* ---- writer ------------------------------------------------------------------ */
struct st_tfrecord_writer {
  st__atomic_file file;
  char *path;
  bool gzip;
  z_stream z;
  uint8_t *out; /* [OUT_BYTES] deflate output */
  int err;      /* errno of the first failed write */
};
#define OUT_BYTES (64u << 10)

st_status st_tfrecord_writer_create(const char *path, const st_tfrecord_options *o,
                                    st_tfrecord_writer **out) {
  ST_REQUIRE(path);
  ST_REQUIRE(out);
  *out = NULL;
  st_tfrecord_options opt = o ? *o : st_tfrecord_default_options();
  if (opt.compression < 0 || opt.compression >= ST_COMPRESSION_COUNT)
    return st_error(ST_ERR_INVALID, "%s: compression %d out of range", path, (int)opt.compression);
  st_tfrecord_writer *w = calloc(1, sizeof *w);
  if (!w || !(w->path = strdup(path))) {
    free(w);
    return st_error(ST_ERR_NOMEM, "%s: out of memory for a TFRecord writer", path);
  }
  st_status s = st__atomic_open(&w->file, w->path);
  if (s != ST_OK) {
    free(w->path);
    free(w);
    return s;
  }
  w->gzip = opt.compression == ST_COMPRESSION_GZIP;
  if (w->gzip && (!(w->out = malloc(OUT_BYTES)) ||
                  deflateInit2(&w->z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)) {
    free(w->out);
    w->out = NULL;
    w->gzip = false;
    st_tfrecord_writer_destroy(w);
    return st_error(ST_ERR_NOMEM, "%s: out of memory for a gzip stream", path);
  }
  *out = w;
  return ST_OK;
}

static void put_raw(st_tfrecord_writer *w, const void *p, size_t n) {
  if (!w->err && n && fwrite(p, 1, n, w->file.f) != n) w->err = errno ? errno : EIO;
}

/* Compress n bytes at p (flush: finish the stream). */
static void put(st_tfrecord_writer *w, const void *p, size_t n, bool finish) {
  if (!w->gzip) {
    put_raw(w, p, n);
    return;
  }
  w->z.next_in = (Bytef *)p;
  w->z.avail_in = (uInt)n;
  int zr;
  do {
    w->z.next_out = w->out;
    w->z.avail_out = OUT_BYTES;
    zr = deflate(&w->z, finish ? Z_FINISH : Z_NO_FLUSH);
    put_raw(w, w->out, OUT_BYTES - w->z.avail_out);
  } while (w->z.avail_out == 0 || (finish && zr != Z_STREAM_END && zr != Z_STREAM_ERROR));
}

st_status st_tfrecord_writer_write(st_tfrecord_writer *w, const void *data, size_t size) {
  ST_REQUIRE(w);
  if (!data && size) return st_error(ST_ERR_INVALID, "%s: data is NULL (size %zu)", __func__, size);
  if (size > (1u << 30))
    return st_error(ST_ERR_INVALID, "%s: a record of %zu bytes (at most 1 GiB per write)",
                    w->path, size);
  uint8_t h[HEADER_BYTES], f[4];
  store_le64(h, size);
  store_le32(h + 8, masked_crc(h, 8));
  store_le32(f, masked_crc(data, size));
  put(w, h, sizeof h, false);
  put(w, data, size, false);
  put(w, f, sizeof f, false);
  if (w->err)
    return st_error(ST_ERR_IO, "%s: writing %s: %s", w->path, w->file.tmp, strerror(w->err));
  return ST_OK;
}

st_status st_tfrecord_writer_close(st_tfrecord_writer *w) {
  ST_REQUIRE(w);
  if (w->gzip) {
    put(w, NULL, 0, true);
    deflateEnd(&w->z);
  }
  st_status s = st__atomic_commit(&w->file, w->err);
  free(w->out);
  free(w->path);
  free(w);
  return s;
}

void st_tfrecord_writer_destroy(st_tfrecord_writer *w) {
  if (!w) return;
  if (w->gzip) deflateEnd(&w->z);
  st__atomic_abort(&w->file);
  free(w->out);
  free(w->path);
  free(w);
}
