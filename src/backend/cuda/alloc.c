/* The CUDA backend's caching allocator: one per physical device, shared by
 * every context on it (a buffer may be freed through another context of the
 * same device). Blocks come from cudaMalloc (never managed memory), rounded
 * up to 512 bytes (2 MiB from 1 MiB on), and go back to a free list on free;
 * a request takes the smallest free block of at least its size and at most
 * twice it, else a new cudaMalloc (after one cudaFree of the whole free list
 * when that fails: out-of-memory is reported only when nothing cached could
 * make room). Block lists are plain arrays searched linearly: a net holds
 * tens of buffers, not thousands. Any thread (one mutex per device).
 *
 * The caches are process-wide by nature (device memory belongs to the
 * process); they are created at first use and live until the process ends. */
#include <pthread.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"

#define MAX_DEVICES 64

typedef struct block {
  void *p;
  size_t bytes;
} block;

struct st__cuda_cache {
  pthread_mutex_t mu;
  int device;
  block *used, *free;
  size_t n_used, n_free, cap_used, cap_free;
};

static pthread_mutex_t g_caches_mu = PTHREAD_MUTEX_INITIALIZER;
static st__cuda_cache *g_caches[MAX_DEVICES];

st__cuda_cache *st__cuda_cache_get(int device) {
  if (device < 0 || device >= MAX_DEVICES) return NULL;
  pthread_mutex_lock(&g_caches_mu);
  st__cuda_cache *c = g_caches[device];
  if (!c && (c = calloc(1, sizeof *c)) != NULL) {
    pthread_mutex_init(&c->mu, NULL);
    c->device = device;
    g_caches[device] = c;
  }
  pthread_mutex_unlock(&g_caches_mu);
  return c;
}

static size_t round_size(size_t bytes) {
  size_t q = bytes >= (1u << 20) ? (2u << 20) : 512;
  return (bytes + q - 1) / q * q;
}

/* Appends b to *arr (grown by doubling); false when out of host memory. */
static bool push(block **arr, size_t *n, size_t *cap, block b) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 32;
    block *na = realloc(*arr, nc * sizeof *na);
    if (!na) return false;
    *arr = na;
    *cap = nc;
  }
  (*arr)[(*n)++] = b;
  return true;
}

/* Index of the best cached block for bytes, or n_free when none fits. */
static size_t best_fit(const st__cuda_cache *c, size_t bytes) {
  size_t best = c->n_free;
  for (size_t i = 0; i < c->n_free; i++) {
    size_t b = c->free[i].bytes;
    if (b >= bytes && b <= 2 * bytes && (best == c->n_free || b < c->free[best].bytes)) best = i;
  }
  return best;
}

/* cudaFree every cached block (the caller holds the lock and set the device). */
static void release_cached(st__cuda_cache *c) {
  for (size_t i = 0; i < c->n_free; i++) cudaFree(c->free[i].p);
  c->n_free = 0;
}

void *st__cuda_cache_alloc(st__cuda_cache *c, size_t bytes, cudaError_t *err) {
  *err = cudaSuccess;
  size_t need = round_size(bytes ? bytes : 1);
  pthread_mutex_lock(&c->mu);
  block b = {NULL, need};
  size_t i = best_fit(c, need);
  if (i < c->n_free) {
    b = c->free[i];
    c->free[i] = c->free[--c->n_free];
  } else if ((*err = cudaSetDevice(c->device)) == cudaSuccess &&
             (*err = cudaMalloc(&b.p, need)) == cudaErrorMemoryAllocation) {
    cudaGetLastError(); /* clear it, make room, try once more */
    release_cached(c);
    *err = cudaMalloc(&b.p, need);
  }
  if (b.p && !push(&c->used, &c->n_used, &c->cap_used, b)) {
    cudaFree(b.p);
    b.p = NULL;
    *err = cudaErrorMemoryAllocation;
  }
  pthread_mutex_unlock(&c->mu);
  return *err == cudaSuccess ? b.p : NULL;
}

void st__cuda_cache_free(st__cuda_cache *c, void *p) {
  if (!p) return;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_used; i++) {
    if (c->used[i].p != p) continue;
    block b = c->used[i];
    c->used[i] = c->used[--c->n_used];
    if (!push(&c->free, &c->n_free, &c->cap_free, b)) cudaFree(b.p);
    break;
  }
  pthread_mutex_unlock(&c->mu);
}
