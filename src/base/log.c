/* Logging to stderr with a process-wide level. The initial level comes from the
 * environment variable STRATA_LOG (debug|info|warn|error|off), read once on first
 * use; the default is ST_LOG_WARN. Each line is written under stderr's stdio lock
 * as "strata: <level>: <message>\n", so lines from different threads never
 * interleave. st_log_set_callback routes the lines to a function instead (the
 * pair read under a mutex, the call made outside it). All functions may be
 * called from any thread. */
#define _POSIX_C_SOURCE 200809L
#include "strata/base.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static atomic_int g_level = ST_LOG_WARN;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_sink_mu = PTHREAD_MUTEX_INITIALIZER;
static st_log_fn g_sink; /* NULL: stderr */
static void *g_sink_user;

static void init_from_env(void) {
  static const struct { const char *name; st_log_level level; } k[] = {
      {"debug", ST_LOG_DEBUG}, {"info", ST_LOG_INFO},   {"warn", ST_LOG_WARN},
      {"warning", ST_LOG_WARN}, {"error", ST_LOG_ERROR}, {"off", ST_LOG_OFF},
      {"none", ST_LOG_OFF}};
  const char *env = getenv("STRATA_LOG");
  if (!env || !*env) return;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (strcasecmp(env, k[i].name) == 0) {
      atomic_store(&g_level, (int)k[i].level);
      return;
    }
  }
  fprintf(stderr,
          "strata: warning: STRATA_LOG='%s' not understood (expected debug, "
          "info, warn, error or off); using warn\n",
          env);
}

void st_log_set_level(st_log_level level) {
  pthread_once(&g_once, init_from_env); /* so the env cannot override later */
  if ((int)level < ST_LOG_DEBUG) level = ST_LOG_DEBUG;
  if (level > ST_LOG_OFF) level = ST_LOG_OFF;
  atomic_store(&g_level, (int)level);
}

st_log_level st_log_get_level(void) {
  pthread_once(&g_once, init_from_env);
  return (st_log_level)atomic_load(&g_level);
}

static const char *level_name(st_log_level level) {
  switch (level) {
    case ST_LOG_DEBUG: return "debug";
    case ST_LOG_INFO: return "info";
    case ST_LOG_WARN: return "warning";
    case ST_LOG_ERROR: return "error";
    default: return "log";
  }
}

void st_log_set_callback(st_log_fn fn, void *user) {
  pthread_mutex_lock(&g_sink_mu);
  g_sink = fn;
  g_sink_user = user;
  pthread_mutex_unlock(&g_sink_mu);
}

/* The message, formatted without a trailing newline, to the sink. */
static void log_to_sink(st_log_fn fn, void *user, st_log_level level, const char *fmt,
                        va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  if (n && msg[n - 1] == '\n') msg[n - 1] = '\0';
  fn(level, msg, user);
}

void st_log(st_log_level level, const char *fmt, ...) {
  if (!fmt || level >= ST_LOG_OFF || (int)level < (int)st_log_get_level()) return;
  pthread_mutex_lock(&g_sink_mu);
  st_log_fn fn = g_sink;
  void *user = g_sink_user;
  pthread_mutex_unlock(&g_sink_mu);
  size_t len = strlen(fmt);
  va_list ap;
  va_start(ap, fmt);
  if (fn) {
    log_to_sink(fn, user, level, fmt, ap);
    va_end(ap);
    return;
  }
  flockfile(stderr);
  fprintf(stderr, "strata: %s: ", level_name(level));
  vfprintf(stderr, fmt, ap);
  if (len == 0 || fmt[len - 1] != '\n') fputc('\n', stderr);
  funlockfile(stderr);
  va_end(ap);
}
