/* Status codes and per-thread error messages: st_status_string names a status,
 * st_error / st_error_prefix record a formatted message in a thread-local buffer
 * (so each thread sees only its own last error), st_last_error reads it back, and
 * st__assert_fail is the single place where a programmer error aborts. All
 * functions may be called from any thread. */
#include "strata/base.h"
#include "base/error_slot.h"

#include <stdatomic.h>
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR_MAX 1024

static _Thread_local char g_err[ERR_MAX]; /* "" when no error */

static const char *const k_status_names[] = {
    [ST_OK] = "ok",
    [ST_ERR_INVALID] = "invalid argument",
    [ST_ERR_FORMAT] = "malformed input",
    [ST_ERR_IO] = "i/o error",
    [ST_ERR_NOMEM] = "out of memory",
    [ST_ERR_NOT_BUILT] = "not built",
    [ST_ERR_NONFINITE] = "non-finite value",
    [ST_ERR_TIMEOUT] = "timed out",
    [ST_ERR_PEER] = "peer lost",
    [ST_ERR_INTERNAL] = "internal error",
    [ST_ERR_STOPPED] = "stopped on request",
};
static_assert(sizeof k_status_names / sizeof k_status_names[0] ==
                  ST_STATUS_COUNT,
              "k_status_names must name every st_status");

const char *st_status_string(st_status s) {
  if ((int)s < 0 || s >= ST_STATUS_COUNT) return "unknown status";
  return k_status_names[s];
}

/* Keep text (n bytes) as this thread's message. One longer than the buffer
 * is elided in the middle ("head ... tail"), at UTF-8 character boundaries:
 * long paths come first and the reason last, so the reason is never cut. */
static void store(const char *text, size_t n) {
  if (n < ERR_MAX) {
    memcpy(g_err, text, n + 1);
    return;
  }
  static const char mark[] = " ... ";
  size_t head = (ERR_MAX - sizeof mark) / 2, tail = ERR_MAX - sizeof mark - head;
  while (head > 0 && ((unsigned char)text[head] & 0xC0) == 0x80) head--;
  size_t from = n - tail;
  while (from < n && ((unsigned char)text[from] & 0xC0) == 0x80) from++;
  memmove(g_err, text, head); /* text may be g_err itself */
  memcpy(g_err + head, mark, sizeof mark - 1);
  memmove(g_err + head + sizeof mark - 1, text + from, n - from);
  g_err[head + sizeof mark - 1 + (n - from)] = '\0';
}

/* vsnprintf into a buffer big enough for the whole text (heap when it is
 * long), append then (an earlier message, or NULL), and store it; the arguments may point into g_err
 * (e.g. st_error(s, "%s", st_last_error())), so g_err is written last. */
static void format_store(const char *then, const char *fmt, va_list ap) {
  char local[ERR_MAX * 2], *buf = local;
  size_t cap = sizeof local;
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(buf, cap, fmt, ap);
  if (n < 0) n = 0;
  size_t extra = then ? strlen(then) : 0;
  if ((size_t)n + extra >= cap) {
    char *big = malloc((size_t)n + extra + 1);
    if (big) {
      buf = big, cap = (size_t)n + extra + 1;
      vsnprintf(buf, cap, fmt, again);
    } else {
      n = (int)cap - 1; /* out of memory: cut (the best we can do) */
      extra = 0;
    }
  }
  va_end(again);
  if (extra) memcpy(buf + n, then, extra + 1);
  store(buf, (size_t)n + extra);
  if (buf != local) free(buf);
}

st_status st_error(st_status s, const char *fmt, ...) {
  if (!fmt) return st_error(ST_ERR_INVALID, "st_error: fmt is NULL");
  va_list ap;
  va_start(ap, fmt);
  format_store(NULL, fmt, ap);
  va_end(ap);
  return s;
}

st_status st_error_prefix(st_status s, const char *fmt, ...) {
  if (!fmt) return st_error(ST_ERR_INVALID, "st_error_prefix: fmt is NULL");
  char old[ERR_MAX];
  memcpy(old, g_err, sizeof old); /* the message the prefix goes before */
  va_list ap;
  va_start(ap, fmt);
  format_store(old, fmt, ap);
  va_end(ap);
  return s;
}

const char *st_last_error(void) { return g_err; }

void st_clear_error(void) { g_err[0] = '\0'; }

void st__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "strata: assertion failed: %s at %s:%d\n", expr, file, line);
  fflush(stderr);
  abort();
}

st_status st__error_keep(st_error_slot *slot, st_status s) {
  if (s == ST_OK || slot->status != ST_OK) return s;
  slot->status = s;
  snprintf(slot->msg, sizeof slot->msg, "%s", st_last_error());
  return s;
}

st_status st__error_raise(const st_error_slot *slot) {
  if (slot->status == ST_OK) return ST_OK;
  return slot->msg[0] ? st_error(slot->status, "%s", slot->msg) : slot->status;
}

/* A lock-free atomic flag: safe to set from a signal handler. */
static atomic_bool g_stop;
void st_request_stop(void) { atomic_store(&g_stop, true); }
bool st_stop_requested(void) { return atomic_load(&g_stop); }
void st_clear_stop_request(void) { atomic_store(&g_stop, false); }
