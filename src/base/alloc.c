/* Aligned host allocation: every block is 64-byte aligned (one cache line, the
 * widest SIMD load) via posix_memalign. Failures return NULL and record
 * ST_ERR_NOMEM with the requested size as this thread's last error. The caller
 * owns the block and frees it with st_free. Thread-safe. */
#define _POSIX_C_SOURCE 200809L
#include "strata/base.h"

#include <stdlib.h>
#include <string.h>

#define ST_ALIGN 64

void *st_alloc(size_t bytes) {
  void *p = NULL;
  /* size 0 still yields a distinct, freeable block */
  if (posix_memalign(&p, ST_ALIGN, bytes ? bytes : ST_ALIGN) != 0) {
    st_error(ST_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
    return NULL;
  }
  return p;
}

void *st_calloc(size_t count, size_t size) {
  size_t bytes;
  if (!st_mul_size(count, size, &bytes)) {
    st_error(ST_ERR_NOMEM,
             "out of memory allocating %zu x %zu bytes (size overflows)", count,
             size);
    return NULL;
  }
  void *p = st_alloc(bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

void st_free(void *p) { free(p); }
