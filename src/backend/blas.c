/* Run-time loading of OpenBLAS. OpenBLAS picks its kernels from the CPU when it
 * is loaded; on CPUs newer than its tables (e.g. Emerald Rapids with 0.3.21) it
 * falls back to a generic SSE3 core and sgemm runs ~5x slower. OPENBLAS_CORETYPE
 * overrides that choice but is read only at load time, so Strata does not link
 * OpenBLAS: the first BLAS use sets the variable from the CPU's features (unless
 * the user set it) and then dlopen()s the library. Without OpenBLAS, gemm falls
 * back to a portable loop and a warning is logged once.
 *
 * The state below is process-wide by nature, not per backend context: a
 * process loads OpenBLAS once, and OpenBLAS keeps one thread count for the
 * whole process (st_blas_set_threads). It is written once inside
 * pthread_once and read-only afterwards. */
#define _GNU_SOURCE
#include "backend/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef STRATA_OPENBLAS_PATH
#define STRATA_OPENBLAS_PATH "libopenblas.so"
#endif
/* ThreadSanitizer builds set 1: OpenBLAS is not instrumented, so TSan cannot
 * see how its worker threads hand a gemm's result back and reports races on
 * every multi-threaded gemm; one BLAS thread keeps TSan's reports to Strata's
 * own threads. 0: no cap. */
#ifndef STRATA_BLAS_MAX_THREADS
#define STRATA_BLAS_MAX_THREADS 0
#endif

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k,
                         float alpha, const float *a, int lda, const float *b,
                         int ldb, float beta, float *c, int ldc);
typedef void (*set_threads_fn)(int n);
typedef char *(*string_fn)(void);

/* Written once inside pthread_once, read-only afterwards. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_once_t g_warn_once = PTHREAD_ONCE_INIT;
static st_status g_status = ST_ERR_NOT_BUILT;
static char g_errmsg[512];
static sgemm_fn g_sgemm;
static set_threads_fn g_set_threads;
static string_fn g_corename;
static string_fn g_config;

/* The OpenBLAS core to force for this CPU, or NULL to trust its detection. */
static const char *choose_coretype(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
#endif
  return NULL;
}

/* True for the cores OpenBLAS uses on AVX2-capable x86 when detection works. */
static bool is_modern_core(const char *name) {
  static const char *const good[] = {"haswell", "skylakex", "cooperlake",
                                     "sapphirerapids", "zen"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    if (strcasecmp(name, good[i]) == 0) return true;
  return false;
}

static void *open_library(void) {
  void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen(STRATA_OPENBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
  return h;
}

/* Warn when OpenBLAS runs a generic core on a CPU that has AVX2: either the
 * user forced it, or a copy was loaded (linked) before Strata could choose. */
static void check_core(const char *wanted, const char *user_env) {
  const char *core = g_corename ? g_corename() : NULL;
  if (!core || !wanted || is_modern_core(core)) return;
  st_log(ST_LOG_WARN,
         "OpenBLAS is using its generic '%s' kernels on a CPU with AVX2, so "
         "sgemm will be several times slower (%s). Set OPENBLAS_CORETYPE=%s in "
         "the environment before starting the program",
         core,
         user_env ? "OPENBLAS_CORETYPE is set to that"
                  : "OpenBLAS was loaded before Strata could choose its core",
         wanted);
}

static void load_once(void) {
  const char *wanted = choose_coretype();
  const char *env = getenv("OPENBLAS_CORETYPE");
  if (env && !*env) env = NULL;
  if (wanted && !env) setenv("OPENBLAS_CORETYPE", wanted, 1);
  void *h = open_library();
  if (!h) {
    const char *why = dlerror();
    snprintf(g_errmsg, sizeof g_errmsg,
             "cannot load OpenBLAS (libopenblas.so.0 or %s): %s; install it "
             "with: apt-get install libopenblas-dev",
             STRATA_OPENBLAS_PATH, why ? why : "unknown error");
    g_status = ST_ERR_NOT_BUILT;
    return;
  }
  *(void **)&g_sgemm = dlsym(h, "cblas_sgemm");
  *(void **)&g_set_threads = dlsym(h, "openblas_set_num_threads");
  *(void **)&g_corename = dlsym(h, "openblas_get_corename");
  *(void **)&g_config = dlsym(h, "openblas_get_config");
  if (!g_sgemm) {
    snprintf(g_errmsg, sizeof g_errmsg,
             "OpenBLAS library has no cblas_sgemm symbol; install it with: "
             "apt-get install libopenblas-dev");
    g_status = ST_ERR_NOT_BUILT;
    return;
  }
  g_status = ST_OK;
  /* the cap from the first use on, not only where st_blas_init is called */
  if (STRATA_BLAS_MAX_THREADS > 0 && g_set_threads) g_set_threads(STRATA_BLAS_MAX_THREADS);
  check_core(wanted, env);
  st_log(ST_LOG_DEBUG, "OpenBLAS loaded: core %s, config %s",
         g_corename ? g_corename() : "?", g_config ? g_config() : "?");
}

st_status st__blas_load(void) {
  pthread_once(&g_once, load_once);
  if (g_status != ST_OK) return st_error(g_status, "%s", g_errmsg);
  return ST_OK;
}

void st_blas_set_threads(int threads) {
  if (st__blas_load() != ST_OK) return;
  if (STRATA_BLAS_MAX_THREADS > 0 && (threads <= 0 || threads > STRATA_BLAS_MAX_THREADS))
    threads = STRATA_BLAS_MAX_THREADS;
  if (threads > 0 && g_set_threads) g_set_threads(threads);
}

/* Logs once that gemm runs without OpenBLAS. */
static void warn_missing(void) {
  st_log(ST_LOG_WARN, "%s; using a slow portable gemm instead", g_errmsg);
}

void st_blas_init(int threads) {
  if (st__blas_load() != ST_OK) {
    pthread_once(&g_warn_once, warn_missing);
    return;
  }
  st_blas_set_threads(threads);
}

const char *st__blas_corename(void) {
  if (st__blas_load() != ST_OK || !g_corename) return "none";
  return g_corename();
}

const char *st__blas_config(void) {
  if (st__blas_load() != ST_OK || !g_config) return "none";
  return g_config();
}

/* C[i, 0:n] = beta * C[i, 0:n] (beta == 0 overwrites, so NaNs in C vanish). */
static void scale_rows(int m, int n, float beta, float *c, int ldc) {
  for (int i = 0; i < m; i++) {
    float *restrict ci = c + (size_t)i * ldc;
    if (beta == 0.0f)
      for (int j = 0; j < n; j++) ci[j] = 0.0f;
    else if (beta != 1.0f)
      for (int j = 0; j < n; j++) ci[j] *= beta;
  }
}

/* Portable gemm used when OpenBLAS is missing: op(B) is packed to [k, n] so the
 * inner loop is a contiguous axpy that the compiler vectorises. */
static void loop_sgemm(bool ta, bool tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb,
                       float *c, int ldc) {
  float *bp = malloc((size_t)k * n * sizeof(float)); /* [k, n] */
  if (!bp) return; /* unreachable in practice; C keeps beta*C */
  for (int p = 0; p < k; p++)
    for (int j = 0; j < n; j++)
      bp[(size_t)p * n + j] = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
  for (int i = 0; i < m; i++) {
    float *restrict ci = c + (size_t)i * ldc;
    for (int p = 0; p < k; p++) {
      float av = alpha * (ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]);
      const float *restrict bj = bp + (size_t)p * n;
      for (int j = 0; j < n; j++) ci[j] += av * bj[j];
    }
  }
  free(bp);
}

void st__sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb, float beta,
               float *c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) { /* OpenBLAS rejects k == 0 (lda < 1) */
    scale_rows(m, n, beta, c, ldc);
    return;
  }
  pthread_once(&g_once, load_once);
  if (g_status == ST_OK) {
    g_sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
            trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b,
            ldb, beta, c, ldc);
    return;
  }
  pthread_once(&g_warn_once, warn_missing);
  scale_rows(m, n, beta, c, ldc);
  loop_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
}
