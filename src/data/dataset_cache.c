/* cache(filename): the items of the first complete pass are written to a
 * file as they go by, and later passes (of this process or a later one) read
 * the file instead of running the pipeline below (tf.data's
 * cache(filename)).
 *
 * A pass starts by opening the file: present, it is read (its header must
 * describe the pipeline's items); absent, the pass runs upstream and writes
 * every item into a temp file beside it (base/fileio.h's atomic file), which
 * is renamed into place only when the pass reached its end with no error
 * and every write succeeded: a pass cut short (an error, or an iterator
 * destroyed early) removes the temp file, so a later run never sees a
 * partial cache. A damaged, truncated or foreign file is an error naming it
 * (ST_ERR_FORMAT; delete it to rebuild it), never silently rebuilt.
 *
 * Format (docs/FORMATS.md "Dataset cache"), little-endian: a 64-byte header
 * (magic "STCACHE1", x rank and 4 dims, x and y floats per example, batch,
 * masked CRC32C of the bytes before it), then per item its example count n
 * (u32, 1..max(batch,1)), the masked CRC32C of n and the payload, and the
 * payload n*(x+y) float32 (x rows, then y rows); then an end mark
 * 0xFFFFFFFF, the item count (u64) and the masked CRC32C of those 12 bytes. */
#define _GNU_SOURCE
#include "data/dataset_impl.h"
#include "base/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CACHE_HEADER 64
#define CACHE_END 0xFFFFFFFFu
static const char cache_magic[8] = {'S', 'T', 'C', 'A', 'C', 'H', 'E', '1'};

typedef struct cache_node {
  st_dataset base;
  char *path;
} cache_node;

typedef struct cache_iter {
  st_iterator base;
  const cache_node *node;
  size_t item_x, item_y;   /* floats per item buffer */
  float *x, *y;            /* the item next hands out (read mode) */
  /* write mode: upstream and the temp file */
  st_iterator *up;
  st__atomic_file af;
  bool writing;
  int write_errno;
  uint64_t items;
  /* read mode */
  FILE *in;
  uint64_t offset;         /* of the next item in the file */
  bool done;               /* the pass is over (either mode) */
} cache_iter;

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

/* The header this node's items have. */
static void make_header(const st_dataset *ds, unsigned char h[CACHE_HEADER]) {
  memset(h, 0, CACHE_HEADER);
  memcpy(h, cache_magic, 8);
  put32(h + 8, (uint32_t)ds->x_shape.rank);
  for (int i = 0; i < ST_MAX_RANK; i++)
    put32(h + 12 + 4 * i, (uint32_t)(i < ds->x_shape.rank ? ds->x_shape.dims[i] : 0));
  put64(h + 28, ds->x_size);
  put64(h + 36, ds->y_size);
  put32(h + 44, (uint32_t)ds->batch);
  put32(h + 60, st_crc32c_mask(st_crc32c(0, h, 60)));
}

/* "x [28, 28, 1] (784 floats), y 1, batch 0 per item" from a header. */
static void header_text(const unsigned char h[CACHE_HEADER], char *out, size_t n) {
  uint32_t rank = get32(h + 8);
  size_t o = (size_t)snprintf(out, n, "x [");
  for (uint32_t i = 0; i < rank && i < ST_MAX_RANK && o < n; i++)
    o += (size_t)snprintf(out + o, n - o, "%s%u", i ? ", " : "", get32(h + 12 + 4 * i));
  if (o < n)
    snprintf(out + o, n - o, "] (%llu floats), y %llu, batch %u per item",
             (unsigned long long)get64(h + 28), (unsigned long long)get64(h + 36), get32(h + 44));
}

/* ---- write mode ---- */

static void write_bytes(cache_iter *it, const void *p, size_t n) {
  if (!it->write_errno && fwrite(p, 1, n, it->af.f) != n) it->write_errno = errno ? errno : EIO;
}

static void write_item(cache_iter *it, const st_batch *b) {
  const st_dataset *ds = &it->node->base;
  size_t nx = (size_t)b->size * ds->x_size, ny = (size_t)b->size * ds->y_size;
  unsigned char h[8];
  put32(h, (uint32_t)b->size);
  uint32_t c = st_crc32c(0, h, 4);
  c = st_crc32c(c, b->x, nx * sizeof(float));
  c = st_crc32c(c, b->y, ny * sizeof(float));
  put32(h + 4, st_crc32c_mask(c));
  write_bytes(it, h, 8);
  write_bytes(it, b->x, nx * sizeof(float));
  write_bytes(it, b->y, ny * sizeof(float));
  it->items++;
}

/* The pass is complete: the end mark, then the temp file into place. */
static st_status finish_write(cache_iter *it) {
  unsigned char t[16];
  put32(t, CACHE_END);
  put64(t + 4, it->items);
  put32(t + 12, st_crc32c_mask(st_crc32c(0, t, 12)));
  write_bytes(it, t, 16);
  it->writing = false;
  st_status s = st__atomic_commit(&it->af, it->write_errno);
  return s == ST_OK ? s : st_error_prefix(s, "cache: ");
}

static st_status write_next(cache_iter *it, st_batch *out, bool *end) {
  if (it->done) return *end = true, ST_OK;
  st_status s = it->up->ops->next(it->up, out, end);
  if (s != ST_OK) {
    st__atomic_abort(&it->af); /* a failed pass caches nothing */
    it->writing = false;
    return s;
  }
  if (!*end) {
    write_item(it, out);
  } else if (it->writing) {
    it->done = true;
    return finish_write(it);
  }
  return ST_OK;
}

/* ---- read mode ---- */

static st_status damaged(const cache_iter *it, uint64_t at, const char *what) {
  return st_error(ST_ERR_FORMAT, "cache %s: offset %llu: %s (a damaged cache file: delete it "
                  "and it is rebuilt by the next complete pass)", it->node->path,
                  (unsigned long long)at, what);
}

static st_status read_next(cache_iter *it, st_batch *out, bool *end) {
  const st_dataset *ds = &it->node->base;
  if (it->done) return *end = true, ST_OK;
  unsigned char h[8];
  if (fread(h, 1, 8, it->in) != 8) return damaged(it, it->offset, "truncated before the end mark");
  uint32_t n = get32(h);
  if (n == CACHE_END) {
    unsigned char t[16];
    memcpy(t, h, 8);
    if (fread(t + 8, 1, 8, it->in) != 8) return damaged(it, it->offset, "truncated end mark");
    if (get32(t + 12) != st_crc32c_mask(st_crc32c(0, t, 12)))
      return damaged(it, it->offset, "end mark CRC mismatch");
    if (get64(t + 4) != it->items) return damaged(it, it->offset, "item count mismatch");
    it->done = true;
    return *end = true, ST_OK;
  }
  int most = ds->batch > 0 ? ds->batch : 1;
  if (n < 1 || n > (uint32_t)most) return damaged(it, it->offset, "item size out of range");
  size_t nx = n * ds->x_size, ny = n * ds->y_size;
  if (fread(it->x, sizeof(float), nx, it->in) != nx || fread(it->y, sizeof(float), ny, it->in) != ny)
    return damaged(it, it->offset, "truncated item");
  uint32_t c = st_crc32c(0, h, 4);
  c = st_crc32c(c, it->x, nx * sizeof(float));
  c = st_crc32c(c, it->y, ny * sizeof(float));
  if (get32(h + 4) != st_crc32c_mask(c)) return damaged(it, it->offset, "item CRC mismatch");
  it->offset += 8 + (nx + ny) * sizeof(float);
  it->items++;
  *out = (st_batch){(int)n, it->x, it->y};
  return ST_OK;
}

/* Open path for reading and check its header against the node. */
static st_status open_read(cache_iter *it, int fd) {
  const cache_node *cn = it->node;
  if (!(it->in = fdopen(fd, "rb"))) {
    close(fd);
    return st_error(ST_ERR_IO, "cache %s: cannot read: %s", cn->path, strerror(errno));
  }
  unsigned char h[CACHE_HEADER], want[CACHE_HEADER];
  make_header(&cn->base, want);
  if (fread(h, 1, CACHE_HEADER, it->in) != CACHE_HEADER || memcmp(h, cache_magic, 8) != 0)
    return st_error(ST_ERR_FORMAT, "cache %s: not a Strata dataset cache (no STCACHE1 header; "
                    "another file of that name? delete it or choose another cache file)", cn->path);
  if (get32(h + 60) != st_crc32c_mask(st_crc32c(0, h, 60)))
    return damaged(it, 0, "header CRC mismatch");
  if (memcmp(h, want, CACHE_HEADER) != 0) {
    char a[128], b[128]; /* both sides, with the example shape (issue 29 D18) */
    header_text(h, a, sizeof a), header_text(want, b, sizeof b);
    return st_error(ST_ERR_FORMAT, "cache %s: written by another pipeline (%s; this one: %s): "
                    "delete it or choose another cache file", cn->path, a, b);
  }
  it->offset = CACHE_HEADER;
  return ST_OK;
}

/* ---- the iterator ---- */

static st_status cache_next(st_iterator *base, st_batch *out, bool *end) {
  cache_iter *it = (cache_iter *)base;
  return it->in ? read_next(it, out, end) : write_next(it, out, end);
}

static void cache_destroy(st_iterator *base) {
  cache_iter *it = (cache_iter *)base;
  if (it->writing) st__atomic_abort(&it->af); /* cut short: no partial cache */
  st_iterator_destroy(it->up);
  if (it->in) fclose(it->in);
  free(it->x);
  free(it);
}

static const st__iter_ops cache_iter_ops = {cache_next, NULL, NULL, cache_destroy};

static st_status start_write(cache_iter *it, st_dataset *ds, uint64_t epoch) {
  st_status s = st__ds_iterate(ds->input, epoch, &it->up);
  if (s != ST_OK) return s;
  if ((s = st__atomic_open(&it->af, it->node->path)) != ST_OK)
    return st_error_prefix(s, "cache: ");
  it->writing = true;
  unsigned char h[CACHE_HEADER];
  make_header(ds, h);
  write_bytes(it, h, CACHE_HEADER);
  return ST_OK;
}

static st_status cache_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  cache_node *cn = (cache_node *)ds;
  cache_iter *it = calloc(1, sizeof *it);
  if (!it) return st_error(ST_ERR_NOMEM, "cache: out of memory for an iterator");
  it->base.ops = &cache_iter_ops;
  it->node = cn;
  it->item_x = st__ds_item_floats(ds, ds->x_size);
  it->item_y = st__ds_item_floats(ds, ds->y_size);
  st_status s;
  int fd;
  if (access(cn->path, F_OK) != 0 && errno == ENOENT) {
    s = start_write(it, ds, epoch);
  } else if ((s = st__open_input(cn->path, &fd, NULL)) == ST_OK) {
    it->x = malloc((it->item_x + it->item_y) * sizeof(float) + 1);
    it->y = it->x ? it->x + it->item_x : NULL;
    s = it->x ? open_read(it, fd) : (close(fd), st_error(ST_ERR_NOMEM, "cache: out of memory"));
  } else {
    s = st_error_prefix(s, "cache: ");
  }
  if (s != ST_OK) {
    cache_destroy(&it->base);
    return s;
  }
  *out = &it->base;
  return ST_OK;
}

static void cache_node_destroy(st_dataset *ds) { free(((cache_node *)ds)->path); }

static const st__ds_ops cache_ops = {"cache", cache_iterate, cache_node_destroy, NULL, NULL, NULL};

st_status st_dataset_cache(st_dataset *ds, const char *filename, st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_cache")) return ST_ERR_INVALID;
  if (!filename || !filename[0])
    return st__ds_fail(ds, ST_ERR_INVALID, "st_dataset_cache: filename is %s (an in-memory cache is not "
                       "supported: give a file)", filename ? "empty" : "NULL");
  if (ds->cardinality == -1)
    return st__ds_fail(ds, ST_ERR_INVALID, "cache %s: the input is infinite (repeat forever "
                       "before cache): no pass would complete", filename);
  cache_node *c = calloc(1, sizeof *c);
  if (!c || !(c->path = strdup(filename))) {
    free(c);
    return st__ds_fail(ds, ST_ERR_NOMEM, "cache: out of memory");
  }
  st__ds_init(&c->base, &cache_ops, ds);
  *out = &c->base;
  return ST_OK;
}
