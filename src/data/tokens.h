/* Internal: one token shard (llm.c's .bin format, data.h) memory-mapped and
 * checked, shared by tokens_file.c (mapping, checks, the writer) and
 * dataset_tokens.c (the dataset node over several shards). */
#ifndef STRATA_DATA_TOKENS_H
#define STRATA_DATA_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "strata/data.h"

typedef struct st__token_file {
  char *path;                  /* owned */
  const unsigned char *map;    /* the whole file, read-only mapping */
  size_t map_size;             /* bytes mapped */
  const unsigned char *tokens; /* map + ST_TOKENS_HEADER_BYTES: [ntok] little-endian */
  int64_t ntok;                /* the header's count, checked against the file size */
  int width;                   /* bytes a token: 2 (uint16) or 4 (uint32) */
} st__token_file;

/* Map path into *f and check its header and size (errors name path, the
 * byte offset and the value); then, when limit > 0, that every token is
 * < limit (a uint32 shard is always checked against 2^24, or limit when
 * smaller). On failure f is left empty (nothing to unmap). */
st_status st__token_file_open(const char *path, int64_t limit, st__token_file *f);
void st__token_file_close(st__token_file *f); /* accepts an empty f */

/* Token i of f (0 <= i < ntok). */
static inline uint32_t st__token_at(const st__token_file *f, int64_t i) {
  const unsigned char *p = f->tokens + (size_t)i * (size_t)f->width;
  return f->width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                       : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24;
}

#endif
