/* Aligned host allocation: every block is 64-byte aligned (one cache line, the
 * widest SIMD load) via posix_memalign; blocks of 4 MiB and more are 2 MiB
 * aligned and advised as transparent huge pages (a dataset read at random
 * rows would otherwise take a TLB miss per row). Failures return NULL and record
 * ST_ERR_NOMEM with the requested size as this thread's last error. The caller
 * owns the block and frees it with st_free. Thread-safe. */
#define _GNU_SOURCE
#include "strata/base.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ST_ALIGN 64
#define HUGE_PAGE (2u << 20)

void *st_alloc(size_t bytes) {
  void *p = NULL;
  bool huge = bytes >= 2 * (size_t)HUGE_PAGE;
  /* size 0 still yields a distinct, freeable block */
  if (posix_memalign(&p, huge ? HUGE_PAGE : ST_ALIGN, bytes ? bytes : ST_ALIGN) != 0) {
    st_error(ST_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
    return NULL;
  }
#ifdef MADV_HUGEPAGE
  if (huge) (void)madvise(p, bytes & ~(size_t)(HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
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
