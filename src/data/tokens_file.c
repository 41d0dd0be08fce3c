/* Token shards in llm.c's format (data.h): opening one (memory-mapped, its
 * header, size and tokens checked, every error naming the file, the byte
 * offset and the value) and writing one (a temp file renamed into place). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/args.h"
#include "base/fileio.h"
#include "data/tokens.h"

/* The largest id a float32 holds exactly: x and y are floats. */
#define FLOAT_EXACT (1ll << 24)

static int32_t le32(const unsigned char *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

/* The header's magic and version: *width 2 or 4. */
static st_status check_header(const char *path, const unsigned char *h, int *width) {
  int32_t magic = le32(h), version = le32(h + 4);
  if (magic != ST_TOKENS_MAGIC_U16 && magic != ST_TOKENS_MAGIC_U32)
    return st_error(ST_ERR_FORMAT, "%s: offset 0: magic %d is not a token shard's (%d: uint16 "
                    "tokens, %d: uint32 tokens; llm.c's format)", path, (int)magic,
                    ST_TOKENS_MAGIC_U16, ST_TOKENS_MAGIC_U32);
  int want = magic == ST_TOKENS_MAGIC_U16 ? 1 : 7;
  if (version != want)
    return st_error(ST_ERR_FORMAT, "%s: offset 4: version %d (a shard with magic %d has "
                    "version %d)", path, (int)version, (int)magic, want);
  *width = magic == ST_TOKENS_MAGIC_U16 ? 2 : 4;
  return ST_OK;
}

/* Header count against the bytes after the header. */
static st_status check_count(const char *path, int64_t ntok, int width, size_t size) {
  uint64_t have = size - ST_TOKENS_HEADER_BYTES, want = (uint64_t)ntok * (uint64_t)width;
  if (ntok <= 0)
    return st_error(ST_ERR_FORMAT, "%s: offset 8: token count %lld (must be > 0)", path,
                    (long long)ntok);
  if (want > have)
    return st_error(ST_ERR_FORMAT, "%s: offset 8: token count %lld needs %llu bytes after the "
                    "header, the file has %llu: truncated at offset %zu", path, (long long)ntok,
                    (unsigned long long)want, (unsigned long long)have, size);
  if (want < have)
    return st_error(ST_ERR_FORMAT, "%s: offset %llu: %llu bytes past the %lld tokens the header "
                    "counts (offset 8)", path, (unsigned long long)(ST_TOKENS_HEADER_BYTES + want),
                    (unsigned long long)(have - want), (long long)ntok);
  return ST_OK;
}

/* Every token < limit. */
static st_status check_tokens(const st__token_file *f, int64_t limit, bool vocab) {
  for (int64_t i = 0; i < f->ntok; i++) {
    uint32_t t = st__token_at(f, i);
    if ((int64_t)t >= limit)
      return st_error(ST_ERR_FORMAT, "%s: offset %lld: token %u (token %lld of the file) is >= "
                      "%s %lld", f->path,
                      (long long)(ST_TOKENS_HEADER_BYTES + i * f->width), t, (long long)i,
                      vocab ? "the vocabulary size" : "2^24, the largest id a float holds exactly,",
                      (long long)limit);
  }
  return ST_OK;
}

/* Map fd (size bytes) and check it into f. */
static st_status map_checked(int fd, size_t size, int64_t limit, st__token_file *f) {
  const char *path = f->path;
  if (size < ST_TOKENS_HEADER_BYTES)
    return st_error(ST_ERR_FORMAT, "%s: %zu bytes: shorter than the %d-byte header of a token "
                    "shard (truncated at offset %zu)", path, size, ST_TOKENS_HEADER_BYTES, size);
  void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED)
    return st_error(ST_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
  f->map = m;
  f->map_size = size;
  f->tokens = f->map + ST_TOKENS_HEADER_BYTES;
  st_status s = check_header(path, f->map, &f->width);
  if (s == ST_OK) {
    f->ntok = le32(f->map + 8);
    s = check_count(path, f->ntok, f->width, size);
  }
  bool vocab = limit > 0;
  if (f->width == 4 && (!vocab || limit > FLOAT_EXACT)) limit = FLOAT_EXACT, vocab = false;
  if (s == ST_OK && limit > 0 && (f->width == 4 || limit < 65536)) s = check_tokens(f, limit, vocab);
  return s;
}

st_status st__token_file_open(const char *path, int64_t limit, st__token_file *f) {
  memset(f, 0, sizeof *f);
  if (!(f->path = strdup(path))) return st_error(ST_ERR_NOMEM, "%s: out of memory", path);
  int fd;
  struct stat sb;
  st_status s = st__open_input(path, &fd, &sb);
  if (s == ST_OK) {
    s = map_checked(fd, (size_t)sb.st_size, limit, f);
    close(fd);
  }
  if (s != ST_OK) st__token_file_close(f);
  return s;
}

void st__token_file_close(st__token_file *f) {
  if (f->map) munmap((void *)f->map, f->map_size);
  free(f->path);
  memset(f, 0, sizeof *f);
}

/* ---- the writer ---- */

struct st_token_writer {
  st__atomic_file file;
  char *path;
  bool u32;
  int64_t count;
  int err; /* errno of the first failed write */
};

st_status st_token_writer_create(const char *path, bool u32, st_token_writer **out) {
  ST_REQUIRE(path);
  ST_REQUIRE(out);
  *out = NULL;
  st_token_writer *w = calloc(1, sizeof *w);
  if (!w || !(w->path = strdup(path))) {
    free(w);
    return st_error(ST_ERR_NOMEM, "%s: out of memory for a token writer", path);
  }
  st_status s = st__atomic_open(&w->file, w->path);
  if (s != ST_OK) {
    free(w->path);
    free(w);
    return s;
  }
  w->u32 = u32;
  static const unsigned char zero[ST_TOKENS_HEADER_BYTES];
  if (fwrite(zero, 1, sizeof zero, w->file.f) != sizeof zero) w->err = errno ? errno : EIO;
  *out = w;
  return ST_OK;
}

st_status st_token_writer_write(st_token_writer *w, const uint32_t *tokens, size_t n) {
  ST_REQUIRE(w);
  ST_REQUIRE(tokens);
  if ((uint64_t)w->count + n > INT32_MAX)
    return st_error(ST_ERR_INVALID, "%s: more than 2^31 - 1 tokens in one shard (the header's "
                    "count is an int32): write several shards", w->path);
  unsigned char buf[4096];
  size_t width = w->u32 ? 4 : 2, per = sizeof buf / width;
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    for (size_t k = 0; k < m; k++) {
      uint32_t t = tokens[i + k];
      if (!w->u32 && t > 65535)
        return st_error(ST_ERR_INVALID, "%s: token %u (token %lld of the file) does not fit a "
                        "uint16 shard (write uint32 tokens)", w->path, t, (long long)(w->count + i + k));
      for (size_t b = 0; b < width; b++) buf[k * width + b] = (unsigned char)(t >> (8 * b));
    }
    if (!w->err && fwrite(buf, width, m, w->file.f) != m) w->err = errno ? errno : EIO;
  }
  w->count += (int64_t)n;
  return ST_OK;
}

int64_t st_token_writer_count(const st_token_writer *w) { return w ? w->count : 0; }

st_status st_token_writer_close(st_token_writer *w) {
  ST_REQUIRE(w);
  int32_t h[3] = {w->u32 ? ST_TOKENS_MAGIC_U32 : ST_TOKENS_MAGIC_U16, w->u32 ? 7 : 1,
                  (int32_t)w->count};
  unsigned char b[12];
  for (int i = 0; i < 12; i++) b[i] = (unsigned char)((uint32_t)h[i / 4] >> (8 * (i % 4)));
  if (!w->err && (fflush(w->file.f) != 0 || fseek(w->file.f, 0, SEEK_SET) != 0 ||
                  fwrite(b, 1, sizeof b, w->file.f) != sizeof b))
    w->err = errno ? errno : EIO;
  st_status s = st__atomic_commit(&w->file, w->err);
  free(w->path);
  free(w);
  return s;
}

void st_token_writer_destroy(st_token_writer *w) {
  if (!w) return;
  st__atomic_abort(&w->file);
  free(w->path);
  free(w);
}
