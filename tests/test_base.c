/* Tests of the base layer: status strings and per-thread error messages,
 * Philox4x32-10 known-answer vectors, RNG distribution sanity, aligned
 * allocation, and the thread pool running every task exactly once. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "strata/base.h"

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || \
    __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static void test_status(void) {
  CHECK_STREQ(st_status_string(ST_OK), "ok");
  for (int s = 0; s < ST_STATUS_COUNT; s++)
    CHECK(st_status_string((st_status)s) && *st_status_string((st_status)s));
  CHECK(st_status_string(ST_STATUS_COUNT) != NULL);
  st_clear_error();
  CHECK_STREQ(st_last_error(), "");
  CHECK(st_error(ST_ERR_FORMAT, "%s: offset %d", "x.idx", 16) == ST_ERR_FORMAT);
  CHECK_STREQ(st_last_error(), "x.idx: offset 16");
  CHECK(st_error_prefix(ST_ERR_IO, "loading %s: ", "model") == ST_ERR_IO);
  CHECK_STREQ(st_last_error(), "loading model: x.idx: offset 16");
  /* the message may be an argument of itself */
  st_error(ST_ERR_INVALID, "[%s]", st_last_error());
  CHECK_STREQ(st_last_error(), "[loading model: x.idx: offset 16]");
  /* long messages are truncated, not overflowed */
  char big[3000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  st_error(ST_ERR_INVALID, "%s", big);
  CHECK(strlen(st_last_error()) > 500 && strlen(st_last_error()) < 3000);
  st_error_prefix(ST_ERR_INVALID, "%s", big);
  CHECK(strlen(st_last_error()) < 3000);
  st_clear_error();
  CHECK_STREQ(st_last_error(), "");
}

static void *error_thread(void *arg) {
  (void)arg;
  st_error(ST_ERR_IO, "thread error");
  return (void *)(uintptr_t)(strcmp(st_last_error(), "thread error") == 0);
}

static void test_error_per_thread(void) {
  st_error(ST_ERR_INVALID, "main error");
  pthread_t t;
  void *ok = NULL;
  CHECK(pthread_create(&t, NULL, error_thread, NULL) == 0);
  pthread_join(t, &ok);
  CHECK(ok == (void *)1);
  CHECK_STREQ(st_last_error(), "main error");
  st_clear_error();
}

static void test_log(void) {
  st_log_level old = st_log_get_level();
  st_log_set_level(ST_LOG_ERROR);
  CHECK_EQ(st_log_get_level(), ST_LOG_ERROR);
  st_log(ST_LOG_INFO, "this must not print %d", 1);
  st_log_set_level(ST_LOG_OFF);
  st_log(ST_LOG_ERROR, "this must not print either");
  st_log_set_level(old);
}

/* Random123 known-answer vectors for philox4x32_10. Counter words are
 * (lo32(counter), hi32(counter), lo32(stream), hi32(stream)) and key words
 * (lo32(seed), hi32(seed)). */
static void test_philox_kat(void) {
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
    uint64_t counter = kat[i].ctr[0] | ((uint64_t)kat[i].ctr[1] << 32);
    uint64_t stream = kat[i].ctr[2] | ((uint64_t)kat[i].ctr[3] << 32);
    uint64_t seed = kat[i].key[0] | ((uint64_t)kat[i].key[1] << 32);
    uint32_t out[4];
    st_philox4x32(seed, stream, counter, out);
    for (int j = 0; j < 4; j++)
      CHECK_MSG(out[j] == kat[i].out[j], "kat %zu word %d: %08x vs %08x", i, j,
                out[j], kat[i].out[j]);
  }
}

static void test_rng_sequence(void) {
  /* the sequential generator walks the Philox blocks in counter order */
  st_rng r = st_rng_make(42, 7);
  uint32_t blk[4];
  for (uint64_t c = 0; c < 3; c++) {
    st_philox4x32(42, 7, c, blk);
    for (int j = 0; j < 4; j++) CHECK(st_rng_u32(&r) == blk[j]);
  }
  st_rng a = st_rng_make(1, 0), b = st_rng_make(1, 0), s = st_rng_make(1, 1);
  int same = 0;
  for (int i = 0; i < 100; i++) {
    uint64_t x = st_rng_u64(&a);
    CHECK(x == st_rng_u64(&b));
    same += x == st_rng_u64(&s);
  }
  CHECK(same == 0); /* streams differ */
}

static void test_rng_distributions(void) {
  const int n = 100000;
  st_rng r = st_rng_make(12345, 3);
  double sum = 0, sum2 = 0;
  float lo = 1, hi = 0;
  for (int i = 0; i < n; i++) {
    float u = st_rng_uniform(&r);
    CHECK(u >= 0.0f && u < 1.0f);
    if (u < lo) lo = u;
    if (u > hi) hi = u;
    sum += u;
    sum2 += (double)u * u;
  }
  double mean = sum / n, var = sum2 / n - mean * mean;
  CHECK_NEAR(mean, 0.5, 0.01);
  CHECK_NEAR(var, 1.0 / 12.0, 0.003);
  CHECK(lo < 0.001f && hi > 0.999f);

  sum = sum2 = 0;
  double sum4 = 0;
  for (int i = 0; i < n; i++) {
    float z = st_rng_normal(&r);
    CHECK(isfinite(z));
    sum += z;
    sum2 += (double)z * z;
    sum4 += (double)z * z * z * z;
  }
  mean = sum / n;
  var = sum2 / n - mean * mean;
  CHECK_NEAR(mean, 0.0, 0.02);
  CHECK_NEAR(var, 1.0, 0.03);
  CHECK_NEAR(sum4 / n, 3.0, 0.15); /* kurtosis of a normal */
}

static void test_rng_below(void) {
  st_rng r = st_rng_make(99, 0);
  int hist[7] = {0};
  const int n = 70000;
  for (int i = 0; i < n; i++) {
    uint64_t x = st_rng_below(&r, 7);
    CHECK(x < 7);
    if (x < 7) hist[x]++;
  }
  for (int k = 0; k < 7; k++) CHECK_NEAR(hist[k], n / 7, 500);
  for (int i = 0; i < 1000; i++) CHECK(st_rng_below(&r, 1) == 0);
  uint64_t big = (1ull << 40) + 3;
  int upper = 0;
  for (int i = 0; i < 1000; i++) {
    uint64_t x = st_rng_below(&r, big);
    CHECK(x < big);
    upper += x >= big / 2;
  }
  CHECK(upper > 400 && upper < 600);
  uint64_t maxn = UINT64_MAX;
  for (int i = 0; i < 100; i++) CHECK(st_rng_below(&r, maxn) < maxn);
  uint64_t n32 = (1ull << 32) + 0; /* just above the 32-bit path */
  for (int i = 0; i < 100; i++) CHECK(st_rng_below(&r, n32) < n32);
}

static void test_alloc(void) {
  size_t sizes[] = {0, 1, 3, 64, 100, 4096, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *p = st_alloc(sizes[i]);
    CHECK(p != NULL);
    CHECK(((uintptr_t)p % 64) == 0);
    if (p && sizes[i]) memset(p, 0xab, sizes[i]);
    st_free(p);
  }
  float *z = st_calloc(1000, sizeof(float));
  CHECK(z != NULL && ((uintptr_t)z % 64) == 0);
  int allzero = 1;
  for (int i = 0; z && i < 1000; i++) allzero &= z[i] == 0.0f;
  CHECK(allzero);
  st_free(z);
  st_free(NULL);
  st_clear_error();
  CHECK(st_calloc(SIZE_MAX / 2, 4) == NULL);
  CHECK(strstr(st_last_error(), "out of memory") != NULL);
#if !SANITIZED
  /* (sanitizer allocators abort on absurd sizes instead of returning NULL) */
  st_clear_error();
  CHECK(st_alloc(SIZE_MAX - 16) == NULL);
  CHECK(strstr(st_last_error(), "out of memory allocating") != NULL);
#endif
}

struct pool_job {
  atomic_int *hits; /* [ntasks] */
};

static void pool_task(void *arg, int task) {
  struct pool_job *j = arg;
  atomic_fetch_add(&j->hits[task], 1);
}

static void test_threadpool(void) {
  st_threadpool *p = NULL;
  CHECK(st_threadpool_create(0, &p) == ST_ERR_INVALID);
  CHECK(p == NULL);
  st_threadpool_destroy(NULL);
  int pool_sizes[] = {1, 3};
  int task_counts[] = {0, 1, 2, 5, 1000, 3, 1000};
  static atomic_int hits[1000];
  for (int s = 0; s < 2; s++) {
    CHECK_OK(st_threadpool_create(pool_sizes[s], &p));
    if (!p) continue;
    CHECK_EQ(st_threadpool_size(p), pool_sizes[s]);
    for (int rep = 0; rep < 20; rep++) {
      for (size_t t = 0; t < sizeof task_counts / sizeof task_counts[0]; t++) {
        int nt = task_counts[t];
        for (int i = 0; i < 1000; i++) atomic_store(&hits[i], 0);
        struct pool_job job = {hits};
        st_threadpool_run(p, nt, pool_task, &job);
        int bad = 0;
        for (int i = 0; i < 1000; i++)
          bad += atomic_load(&hits[i]) != (i < nt ? 1 : 0);
        CHECK_MSG(bad == 0, "pool %d, %d tasks: %d wrong", pool_sizes[s], nt,
                  bad);
      }
    }
    st_threadpool_destroy(p);
    p = NULL;
  }
}

/* The pool's threads poll briefly after a run and then sleep; the caller
 * polls for the workers and then sleeps. Runs spaced past the polling window
 * (workers asleep) and tasks longer than it (caller asleep) must still run
 * every task once, and back-to-back runs must reach the (polling) workers. */
typedef struct slow_job {
  pthread_t caller;
  atomic_int hits[4], on_workers;
  int task_us;
} slow_job;
static void sleep_us(long us) {
  struct timespec t = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&t, NULL);
}
static void slow_task(void *arg, int t) {
  slow_job *j = arg;
  if (j->task_us) sleep_us(j->task_us);
  atomic_fetch_add(&j->hits[t], 1);
  if (!pthread_equal(pthread_self(), j->caller)) atomic_fetch_add(&j->on_workers, 1);
}
static void test_threadpool_sleep_wake(void) {
  st_threadpool *p = NULL;
  CHECK_OK(st_threadpool_create(2, &p));
  if (!p) return;
  for (int mode = 0; mode < 3; mode++) { /* back to back, spaced, slow tasks */
    slow_job j = {.caller = pthread_self(), .task_us = mode == 2 ? 2000 : 0};
    int runs = mode == 0 ? 2000 : 10;
    for (int r = 0; r < runs; r++) {
      if (mode == 1) sleep_us(3000); /* well past the workers' polling */
      st_threadpool_run(p, 4, slow_task, &j);
    }
    int bad = 0;
    for (int t = 0; t < 4; t++) bad += atomic_load(&j.hits[t]) != runs;
    CHECK_MSG(bad == 0, "mode %d: %d of 4 tasks did not run exactly %d times", mode, bad, runs);
    /* slow tasks: the caller cannot have run all four of each run in time */
    if (mode == 2) CHECK(atomic_load(&j.on_workers) > 0);
    if (mode == 0) CHECK_MSG(atomic_load(&j.on_workers) > 0, "no task ran on a pool thread");
  }
  st_threadpool_destroy(p);
}

static void test_util(void) {
  double t0 = st_now_seconds();
  double t1 = st_now_seconds();
  CHECK(t1 >= t0 && t0 > 0);
  CHECK(st_peak_rss_bytes() > 1024 * 1024);
  size_t out;
  CHECK(st_mul_size(3, 4, &out) && out == 12);
  CHECK(!st_mul_size(SIZE_MAX, 2, &out));
}

/* Pool threads flush subnormals to zero (base/fpenv.h: x86 SSE only). */
typedef struct ftz_job {
  pthread_t caller;
  atomic_int on_workers, flushed;
} ftz_job;
static void ftz_task(void *arg, int t) {
  ftz_job *j = arg;
  (void)t;
  sleep_us(100); /* long enough that the caller cannot take every task first */
  volatile float tiny = 1e-30f, scale = 1e-10f;
  float r = tiny * scale; /* 1e-40: subnormal in IEEE, 0 with FTZ */
  if (!pthread_equal(pthread_self(), j->caller)) {
    atomic_fetch_add(&j->on_workers, 1);
    atomic_fetch_add(&j->flushed, r == 0.0f);
  }
}
static void test_threadpool_ftz(void) {
#if defined(__SSE2__)
  st_threadpool *p = NULL;
  CHECK_OK(st_threadpool_create(2, &p));
  if (!p) return;
  ftz_job j = {.caller = pthread_self()};
  for (int rep = 0; rep < 50 && atomic_load(&j.on_workers) == 0; rep++)
    st_threadpool_run(p, 16, ftz_task, &j);
  CHECK(atomic_load(&j.on_workers) > 0);
  CHECK_MSG(atomic_load(&j.flushed) == atomic_load(&j.on_workers),
            "%d of %d tasks on pool threads saw a subnormal", atomic_load(&j.on_workers) -
            atomic_load(&j.flushed), atomic_load(&j.on_workers));
  volatile float tiny = 1e-30f, scale = 1e-10f;
  CHECK_MSG(tiny * scale != 0.0f, "the caller's floating-point state was changed");
  st_threadpool_destroy(p);
#endif
}

static const check_case cases[] = {CHECK_CASE(test_status), CHECK_CASE(test_error_per_thread), CHECK_CASE(test_log), CHECK_CASE(test_philox_kat), CHECK_CASE(test_rng_sequence), CHECK_CASE(test_rng_distributions), CHECK_CASE(test_rng_below), CHECK_CASE(test_alloc), CHECK_CASE(test_threadpool), CHECK_CASE(test_threadpool_ftz), CHECK_CASE(test_threadpool_sleep_wake), CHECK_CASE(test_util)};

int main(int argc, char **argv) {
  return CHECK_MAIN(argc, argv, cases);
}
