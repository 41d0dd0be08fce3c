/* Reserved float buffers with committed windows (base/vmem.h): mmap of
 * PROT_NONE address space, mprotect to commit, madvise + mprotect to give
 * pages back. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/vmem.h"

static size_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096u;
}

static size_t total_bytes(size_t n) {
  size_t pg = page_size(), b = (n ? n : 1) * sizeof(float);
  return (b + pg - 1) / pg * pg;
}

float *st__vm_reserve(size_t n, const char *what) {
  void *p = mmap(NULL, total_bytes(n), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    st_error(ST_ERR_NOMEM, "out of address space reserving %zu bytes for %s (%s)",
             n * sizeof(float), what, strerror(errno));
    return NULL;
  }
  return p;
}

st_status st__vm_commit(float *p, size_t n, size_t lo, size_t len, const char *what) {
  if (!len) return ST_OK;
  size_t pg = page_size(), a = lo * sizeof(float) / pg * pg;
  size_t b = ((lo + len) * sizeof(float) + pg - 1) / pg * pg;
  if (b > total_bytes(n)) b = total_bytes(n);
  if (mprotect((char *)p + a, b - a, PROT_READ | PROT_WRITE) != 0)
    return st_error(ST_ERR_NOMEM, "out of memory: could not allocate %zu bytes for %s (%s)",
                    b - a, what, strerror(errno));
  return ST_OK;
}

static void give_back(char *base, size_t a, size_t b) {
  if (b <= a) return;
  madvise(base + a, b - a, MADV_DONTNEED);
  mprotect(base + a, b - a, PROT_NONE);
}

void st__vm_keep_only(float *p, size_t n, size_t lo, size_t len) {
  size_t pg = page_size(), end = total_bytes(n);
  if (!len) {
    give_back((char *)p, 0, end);
    return;
  }
  size_t a = lo * sizeof(float) / pg * pg;
  size_t b = ((lo + len) * sizeof(float) + pg - 1) / pg * pg;
  give_back((char *)p, 0, a);
  give_back((char *)p, b < end ? b : end, end);
}

void st__vm_keep_two(float *p, size_t n, size_t lo1, size_t len1, size_t lo2, size_t len2) {
  if (!len2 || !len1) {
    st__vm_keep_only(p, n, len1 ? lo1 : lo2, len1 ? len1 : len2);
    return;
  }
  if (lo2 < lo1) { /* in address order */
    size_t t = lo1, u = len1;
    lo1 = lo2, len1 = len2, lo2 = t, len2 = u;
  }
  size_t pg = page_size(), end = total_bytes(n);
  size_t a1 = lo1 * sizeof(float) / pg * pg, b1 = ((lo1 + len1) * sizeof(float) + pg - 1) / pg * pg;
  size_t a2 = lo2 * sizeof(float) / pg * pg, b2 = ((lo2 + len2) * sizeof(float) + pg - 1) / pg * pg;
  give_back((char *)p, 0, a1);
  give_back((char *)p, b1, a2);
  give_back((char *)p, b2 < end ? b2 : end, end);
}

void st__vm_release(float *p, size_t n) {
  if (p) munmap(p, total_bytes(n));
}
