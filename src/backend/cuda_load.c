/* Run-time loading of the CUDA backend module (libstrata_cuda.so, built from
 * src/backend/cuda/ when CMake finds the CUDA toolkit; see cuda_module.h for
 * the interface). Nothing here links CUDA: a `gpu:N` request dlopen()s the
 * driver and the module, as blas.c does for OpenBLAS, so the library and the
 * CLI start on machines without either, and every missing piece gets its own
 * message. The module is looked for at $STRATA_CUDA_MODULE, next to the
 * running program, then where this build put it (STRATA_CUDA_MODULE_PATH).
 *
 * The state below is process-wide by nature (a process loads a shared module
 * once); it is written once inside pthread_once and read-only afterwards. */
#define _GNU_SOURCE
#include "backend/cuda.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by CMake on this file: the module this build made ("" when none was
 * built), and why none was. */
#ifndef STRATA_CUDA_MODULE_PATH
#define STRATA_CUDA_MODULE_PATH ""
#endif
#ifndef STRATA_CUDA_NOT_BUILT
#define STRATA_CUDA_NOT_BUILT "it was configured without the CUDA toolkit"
#endif
#define MODULE_FILE "libstrata_cuda.so"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static st_status g_status = ST_ERR_NOT_BUILT;
static char g_errmsg[1024];
static st__cuda_module g_module;

static const st__cuda_host k_host = {.error = st_error, .log = st_log};

/* Records the failure of the one load attempt (long paths are cut). */
__attribute__((format(printf, 2, 3))) static void fail(st_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
  va_end(ap);
  g_status = s;
}

/* The directory of the running program into dir ("" when unknown). */
static void program_dir(char *dir, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
  dir[n > 0 ? n : 0] = '\0';
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else dir[0] = '\0';
}

/* The module's path into path; false (and the message set) when there is none. */
static bool find_module(char *path, size_t cap) {
  const char *env = getenv("STRATA_CUDA_MODULE");
  if (env && *env) {
    snprintf(path, cap, "%s", env);
    return true;
  }
  if (!STRATA_CUDA_MODULE_PATH[0]) {
    fail(ST_ERR_NOT_BUILT, "this build of Strata has no CUDA backend: %s (docs/GPU.md "
         "says how to build it); use cpu devices", STRATA_CUDA_NOT_BUILT);
    return false;
  }
  char dir[PATH_MAX];
  program_dir(dir, sizeof dir);
  snprintf(path, cap, "%s/%s", dir, MODULE_FILE);
  if (dir[0] && access(path, R_OK) == 0) return true;
  snprintf(path, cap, "%s", STRATA_CUDA_MODULE_PATH);
  if (access(path, R_OK) == 0) return true;
  fail(ST_ERR_NOT_BUILT, "this build of Strata has no CUDA backend: its module " MODULE_FILE
       " is neither next to the program (%s) nor at %s (set STRATA_CUDA_MODULE to its path)",
       dir[0] ? dir : "unknown directory", STRATA_CUDA_MODULE_PATH);
  return false;
}

/* The driver first: without it the module would load and every CUDA call
 * would fail with a less helpful error. The handle stays open. */
static bool load_driver(void) {
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) return true;
  const char *why = dlerror();
  fail(ST_ERR_NOT_BUILT, "no NVIDIA driver: libcuda.so.1 cannot be loaded (%s); GPUs "
       "need the NVIDIA driver; use cpu devices", why ? why : "unknown error");
  return false;
}

static bool open_module(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    fail(ST_ERR_NOT_BUILT, "the CUDA backend module %s cannot be loaded: %s", path,
         why ? why : "unknown error");
    return false;
  }
  st__cuda_module_open_fn open_fn;
  *(void **)&open_fn = dlsym(h, ST__CUDA_MODULE_ENTRY);
  if (!open_fn) {
    fail(ST_ERR_NOT_BUILT, "%s is not a Strata CUDA module (it has no %s symbol)", path,
         ST__CUDA_MODULE_ENTRY);
    return false;
  }
  st__cuda_module m = {0};
  st_status s = open_fn(ST__CUDA_MODULE_ABI, &k_host, &m);
  if (s == ST_OK && (m.abi != ST__CUDA_MODULE_ABI || !m.device_count))
    s = st_error(ST_ERR_NOT_BUILT, "module built for interface %u, this Strata has %u",
                 m.abi, ST__CUDA_MODULE_ABI);
  if (s != ST_OK) {
    fail(s, "the CUDA backend module %s: %s", path, st_last_error());
    return false;
  }
  g_module = m;
  return true;
}

static void load_once(void) {
  char path[PATH_MAX + 32];
  if (!find_module(path, sizeof path) || !load_driver() || !open_module(path)) return;
  g_status = ST_OK;
  char v[256] = "";
  if (g_module.versions) g_module.versions(v, sizeof v);
  st_log(ST_LOG_DEBUG, "CUDA backend module %s loaded (%s)", path, v);
}

st_status st__cuda_load(const st__cuda_module **out) {
  pthread_once(&g_once, load_once);
  if (g_status != ST_OK) return st_error(g_status, "%s", g_errmsg);
  if (out) *out = &g_module;
  return ST_OK;
}

st_status st__cuda_device_count(int *count) {
  *count = 0;
  st_status s = st__cuda_load(NULL);
  if (s == ST_OK) s = g_module.device_count(count);
  if (s != ST_OK) return s;
  if (*count < 1)
    return st_error(ST_ERR_INVALID, "no CUDA device: cudaGetDeviceCount found %d devices "
                    "(the driver is loaded); use cpu devices", *count);
  return ST_OK;
}

/* Digits only, no sign, no leading '+', fits an int. */
static bool parse_index(const char *p, int len, int *index) {
  if (len < 1 || len > 9 || (int)strspn(p, "0123456789") < len) return false;
  *index = 0;
  for (int i = 0; i < len; i++) *index = *index * 10 + (p[i] - '0');
  return true;
}

int st__gpu_device_parse(const char *dev, int len, int *index) {
  static const char *const prefixes[] = {"/device:GPU:", "/device:gpu:", "/gpu:", "gpu:",
                                         "cuda:"};
  if ((len == 3 && !strncmp(dev, "gpu", 3)) || (len == 4 && !strncmp(dev, "/gpu", 4))) {
    *index = 0;
    return 1;
  }
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
    int pl = (int)strlen(prefixes[i]);
    if (len >= pl && !strncmp(dev, prefixes[i], (size_t)pl))
      return parse_index(dev + pl, len - pl, index) ? 1 : -1;
  }
  static const char *const gpuish[] = {"gpu", "/gpu", "cuda", "/device:GPU", "/device:gpu"};
  for (size_t i = 0; i < sizeof gpuish / sizeof *gpuish; i++)
    if (len >= (int)strlen(gpuish[i]) && !strncmp(dev, gpuish[i], strlen(gpuish[i]))) return -1;
  return 0;
}

st_status st__cuda_check_device(const char *name, int index, int logical) {
  int count = 0;
  st_status s = st__cuda_device_count(&count);
  if (s != ST_OK) return st_error_prefix(s, "device '%s': ", name);
  if (logical < 1) logical = 1;
  if ((long)index < (long)count * logical) return ST_OK;
  char lg[96] = "";
  if (logical > 1)
    snprintf(lg, sizeof lg, " split into %d logical GPUs each (%d in all)", logical,
             count * logical);
  return st_error(ST_ERR_INVALID, "device '%s': GPU index %d out of range: this machine has "
                  "%d GPU%s%s, gpu:0 to gpu:%d", name, index, count, count == 1 ? "" : "s", lg,
                  count * logical - 1);
}
