/* Strata base layer: status codes, per-thread error messages, logging to stderr,
 * counter-based RNG (Philox4x32-10), aligned allocation and a small thread pool.
 * Everything here may be called from any thread unless a comment says otherwise. */
#ifndef STRATA_BASE_H
#define STRATA_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------ */
typedef enum st_status {
  ST_OK = 0,
  ST_ERR_INVALID,    /* bad argument, option or usage */
  ST_ERR_FORMAT,     /* malformed input data (file, config, frame) */
  ST_ERR_IO,         /* the OS refused a read/write/open */
  ST_ERR_NOMEM,      /* allocation failed */
  ST_ERR_NOT_BUILT,  /* optional component not compiled in */
  ST_ERR_NONFINITE,  /* NaN or Inf where a finite value was required */
  ST_ERR_TIMEOUT,    /* a peer or collective did not answer in time */
  ST_ERR_PEER,       /* a peer was lost */
  ST_ERR_INTERNAL,   /* a bug in Strata */
  ST_ERR_STOPPED,    /* stopped on request (st_request_stop: SIGTERM, ...) */
  ST_STATUS_COUNT
} st_status;

/* Short fixed name of a status ("invalid argument", ...). */
const char *st_status_string(st_status s);

/* Preemption: ask every st_model_fit of this process to stop at its next step
 * boundary (async-signal-safe: call it from a SIGTERM handler). fit then
 * writes its backup there (fit options' backup_dir; with several workers all
 * stop at the same step) and returns ST_ERR_STOPPED; running the same fit
 * again resumes from it. st_stop_requested reads the flag;
 * st_clear_stop_request resets it. */
void st_request_stop(void);
bool st_stop_requested(void);
void st_clear_stop_request(void);

/* Record a formatted message as this thread's last error and return s unchanged,
 * so callers write `return st_error(ST_ERR_FORMAT, "%s: offset %zu: ...", ...)`.
 * Messages name the file, offset, field or value at fault. A NULL fmt records
 * "st_error: fmt is NULL" and returns ST_ERR_INVALID (st_error_prefix too). */
st_status st_error(st_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the current last-error message with more context ("loading x: " + old). */
st_status st_error_prefix(st_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* This thread's last error message ("" when none). Valid until the next st_error. */
const char *st_last_error(void);
void st_clear_error(void);

/* Programmer errors only (never bad input): prints file:line and aborts. For the
 * library's own code: st__assert_fail is not exported by libstrata.so. */
#define ST_ASSERT(cond)                                                   \
  do {                                                                    \
    if (!(cond)) st__assert_fail(#cond, __FILE__, __LINE__);              \
  } while (0)
/* Internal (through ST_ASSERT only): prints the failed check and aborts. */
void st__assert_fail(const char *expr, const char *file, int line)
    __attribute__((noreturn));

/* ---- logging (stderr or a callback; never stdout) ------------------------- */
typedef enum st_log_level {
  ST_LOG_DEBUG = 0,
  ST_LOG_INFO,
  ST_LOG_WARN,
  ST_LOG_ERROR,
  ST_LOG_OFF
} st_log_level;
/* The level below which st_log drops messages (default ST_LOG_WARN, or the
 * environment's STRATA_LOG); st_log writes one printf-style line to stderr
 * ("strata: warning: ..."), or hands it to the log callback when one is set,
 * never stdout. Any thread. */
void st_log_set_level(st_log_level level); /* default ST_LOG_WARN; env STRATA_LOG */
st_log_level st_log_get_level(void);
void st_log(st_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A log sink: receives each message that passes the level filter, formatted,
 * without the "strata: <level>: " prefix nor a trailing newline (message is
 * valid only during the call; it is cut at 1023 bytes). It may be called from
 * any thread, concurrently. */
typedef void (*st_log_fn)(st_log_level level, const char *message, void *user);
/* Routes the library's log messages to fn(level, message, user) instead of
 * stderr; fn may be NULL: restores stderr. The previous callback may still be running
 * in another thread when this returns. Any thread. */
void st_log_set_callback(st_log_fn fn, void *user);

/* ---- counter-based RNG --------------------------------------------------- */
/* Philox4x32-10 keyed by (seed, stream); counter selects the block. Pure
 * function: the same (seed, stream, counter) always gives the same 4 words, so
 * results never depend on thread timing. */
void st_philox4x32(uint64_t seed, uint64_t stream, uint64_t counter,
                   uint32_t out[4]);

/* Sequential generator over the Philox blocks of one (seed, stream). Not shared
 * between threads: each thread or replica owns its own. */
typedef struct st_rng {
  uint64_t seed, stream, counter;
  uint32_t buf[4];
  int pos; /* next unread word of buf; 4 = empty */
} st_rng;
/* A generator at the start of (seed, stream); the next 32 or 64 random bits
 * (r may not be NULL). */
st_rng st_rng_make(uint64_t seed, uint64_t stream);
uint32_t st_rng_u32(st_rng *r);
uint64_t st_rng_u64(st_rng *r);
float st_rng_uniform(st_rng *r);               /* [0, 1) */
float st_rng_normal(st_rng *r);                /* mean 0, stddev 1 */
uint64_t st_rng_below(st_rng *r, uint64_t n);  /* uniform in [0, n), unbiased */
/* Map a 32-bit word to a float in [0,1) (24 bits). */
static inline float st_u32_to_unit(uint32_t w) {
  return (float)(w >> 8) * (1.0f / 16777216.0f);
}

/* ---- allocation ---------------------------------------------------------- */
/* 64-byte aligned (blocks of 4 MiB and more: 2 MiB-aligned and advised as
 * transparent huge pages). On failure return NULL and set ST_ERR_NOMEM with
 * the size. */
void *st_alloc(size_t bytes);
void *st_calloc(size_t count, size_t size); /* zeroed; checks count*size overflow */
void st_free(void *p);                      /* accepts NULL */

/* ---- thread pool --------------------------------------------------------- */
typedef struct st_threadpool st_threadpool;
/* n worker threads (n >= 1; the caller's thread also takes tasks). */
st_status st_threadpool_create(int n, st_threadpool **out);
void st_threadpool_destroy(st_threadpool *p); /* accepts NULL; joins workers */
int st_threadpool_size(const st_threadpool *p); /* workers, not counting the caller */
/* Run fn(arg, i) for i in [0, ntasks) across the pool and the calling thread;
 * returns when all are done (p may be NULL: the calling thread runs them all).
 * Only one thread may call it on a pool at a time.
 * After a run the workers poll for the next one for up to 200 us (a training
 * step's runs follow that closely), then sleep: an idle pool costs nothing. */
void st_threadpool_run(st_threadpool *p, int ntasks,
                       void (*fn)(void *arg, int task), void *arg);

/* ---- checksums -------------------------------------------------------------- */
/* CRC-32C (Castagnoli), as TFRecord and TensorFlow checkpoints use it:
 * st_crc32c(0, "123456789", 9) == 0xE3069283. Pass the previous value as crc
 * to continue a running checksum. */
uint32_t st_crc32c(uint32_t crc, const void *data, size_t n);
/* TensorFlow's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
static inline uint32_t st_crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- shapes (base/shape.c) ----------------------------------------------- */
/* Per-example shape (no batch dimension): [d] for vectors, [h,w,c] images.
 * Here, below data and nn, because both describe their tensors with it. */
#define ST_MAX_RANK 4
typedef struct st_shape {
  int rank;
  int dims[ST_MAX_RANK];
} st_shape;
/* Shapes of rank 1 and 3 (h, w, c: channels last), their element count
 * and equality (same rank and dims). */
st_shape st_shape1(int d0);
st_shape st_shape3(int h, int w, int c);
size_t st_shape_size(st_shape s);                 /* product of dims */
bool st_shape_equal(st_shape a, st_shape b);
/* "(None, 13, 13, 32)" into buf (Keras style with the batch dimension). */
const char *st_shape_format(st_shape s, char *buf, size_t n);

/* ---- small utilities ----------------------------------------------------- */
double st_now_seconds(void);       /* monotonic clock */
size_t st_peak_rss_bytes(void);    /* ru_maxrss of this process */
/* ---- files (base/fileio.c) ------------------------------------------------ */
/* Replace the file at path atomically, as Strata writes every output file:
 * fill(f, ctx) writes the new contents into a temp file beside path and
 * returns 0, or -1 with errno set when a write failed; then flush, fsync,
 * rename over path and fsync of its directory. A name planted in advance (a
 * symlink included) is never written through. ST_ERR_INVALID "<path>: exists
 * and is not a regular file: not replaced"; ST_ERR_IO naming path, the temp
 * file and the reason (ENOSPC, EFBIG, ...), the old file at path left as it
 * was; ST_ERR_NOMEM. Any thread. */
st_status st_write_file_atomic(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx);
/* Read the regular file at path into *buf (malloc'd, NUL-terminated one byte
 * past *len; the caller frees), at most max_bytes bytes; a FIFO in the way
 * does not block. Errors name the path: ST_ERR_IO "cannot open: <reason>" or
 * "read failed"; ST_ERR_FORMAT "not a regular file", "file is N bytes, more
 * than the <limit> limit" or "file grew while being read"; ST_ERR_NOMEM. On
 * failure *buf is NULL. Any thread. */
st_status st_read_file(const char *path, size_t max_bytes, char **buf, size_t *len);

/* a*b into *out (out may be NULL: only the check); false on size_t overflow. */
static inline bool st_mul_size(size_t a, size_t b, size_t *out) {
  size_t tmp;
  return !__builtin_mul_overflow(a, b, out ? out : &tmp);
}

#ifdef __cplusplus
}
#endif
#endif
