/* TensorBoard event files (the writer behind st_tensorboard_create/scalar/flush/destroy;
 * the Keras-style TensorBoard callback over it is src/train/tensorboard.c).
 *
 * Layout: <log_dir>/train/events.out.tfevents.<unix seconds>.<host> and the same
 * under validation/ (created at the first validation scalar, so a fit without
 * validation data leaves no empty run). A name already taken gets ".1", ".2",
 * ... appended (TensorBoard reads any name containing "tfevents").
 *
 * Each file is a sequence of TFRecord frames:
 *   uint64 LE length | uint32 LE masked CRC32C(length bytes) | data | uint32 LE
 *   masked CRC32C(data)
 * where data is an Event protobuf, hand-encoded (proto3 wire format):
 *   Event   { double wall_time = 1; int64 step = 2;
 *             oneof what { string file_version = 3; Summary summary = 5; } }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; oneof value { float simple_value = 2; } }
 * The first record is file_version "brain.Event:2". step is omitted when 0
 * (proto3 default); simple_value, in a oneof, is always written.
 *
 * An st_tensorboard is used by one thread at a time. Writes go through stdio
 * buffers, pushed to the OS by st_tensorboard_flush/destroy (the callback flushes
 * at every epoch end). When a run's file is still empty after a failed write
 * (a full disk at the first flush), it is removed, and with it the run
 * directory and log_dir when this writer created them and they are empty:
 * no 0-byte event file is left (a later scalar of that run starts again). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/args.h"
#include "strata/train.h"

#define TB_MAX_TAG 256     /* bytes; longer tags are rejected */
#define TB_EVENT_CAP 512   /* encoded Event bytes, enough for TB_MAX_TAG */

enum { RUN_TRAIN = 0, RUN_VALIDATION = 1, RUN_COUNT };
static const char *const run_names[RUN_COUNT] = {"train", "validation"};

struct st_tensorboard {
  char *log_dir;           /* malloc'd copy */
  long long start_seconds; /* <unix seconds> in the file names */
  char host[256];
  FILE *f[RUN_COUNT];      /* NULL until the run is opened */
  char *path[RUN_COUNT];   /* malloc'd file path, for messages */
  bool made_run_dir[RUN_COUNT], made_log_dir; /* created by open_run */
};

/* ---- protobuf wire format ------------------------------------------------ */
/* Each put_* appends to buf at *n; callers size buf so nothing overflows. */
static void put_varint(unsigned char *buf, size_t *n, uint64_t v) {
  while (v >= 0x80) {
    buf[(*n)++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  buf[(*n)++] = (unsigned char)v;
}

static void put_key(unsigned char *buf, size_t *n, unsigned field, unsigned wire) {
  put_varint(buf, n, (uint64_t)(field << 3 | wire));
}

static void put_le(unsigned char *buf, size_t *n, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) buf[(*n)++] = (unsigned char)(v >> (8 * i));
}

static void put_double(unsigned char *buf, size_t *n, unsigned field, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  put_key(buf, n, field, 1); /* wire type 1: 64-bit */
  put_le(buf, n, bits, 8);
}

static void put_float(unsigned char *buf, size_t *n, unsigned field, float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  put_key(buf, n, field, 5); /* wire type 5: 32-bit */
  put_le(buf, n, bits, 4);
}

static void put_bytes(unsigned char *buf, size_t *n, unsigned field, const void *p,
                      size_t len) {
  put_key(buf, n, field, 2); /* wire type 2: length-delimited */
  put_varint(buf, n, len);
  memcpy(buf + *n, p, len);
  *n += len;
}

/* Event header fields: wall_time (1) and step (2, omitted when 0). */
static void put_event_head(unsigned char *buf, size_t *n, double wall, int64_t step) {
  put_double(buf, n, 1, wall);
  if (step != 0) {
    put_key(buf, n, 2, 0); /* int64: two's complement varint, 10 bytes if < 0 */
    put_varint(buf, n, (uint64_t)step);
  }
}

/* Event{wall, step, summary{value{tag, simple_value}}} into buf[TB_EVENT_CAP]. */
static size_t encode_scalar_event(unsigned char *buf, double wall, int64_t step,
                                  const char *tag, size_t tag_len, float value) {
  unsigned char val[TB_MAX_TAG + 16], sum[TB_MAX_TAG + 32];
  size_t nv = 0, ns = 0, n = 0;
  put_bytes(val, &nv, 1, tag, tag_len);
  put_float(val, &nv, 2, value);
  put_bytes(sum, &ns, 1, val, nv); /* Summary.value */
  put_event_head(buf, &n, wall, step);
  put_bytes(buf, &n, 5, sum, ns);  /* Event.summary */
  return n;
}

/* ---- files --------------------------------------------------------------- */
static double wall_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* mkdir -p: every missing component of path, mode 0777 & ~umask. */
static st_status mkdir_p(const char *path) {
  size_t len = strlen(path);
  char *tmp = malloc(len + 1);
  if (!tmp) return st_error(ST_ERR_NOMEM, "%s: out of memory", path);
  memcpy(tmp, path, len + 1);
  for (size_t i = 1; i <= len; i++) {
    if (tmp[i] != '/' && tmp[i] != 0) continue;
    char saved = tmp[i];
    tmp[i] = 0;
    struct stat sb;
    if (mkdir(tmp, 0777) != 0 && !(errno == EEXIST && stat(tmp, &sb) == 0 &&
                                   S_ISDIR(sb.st_mode))) {
      int e = errno == EEXIST ? ENOTDIR : errno;
      st_status s = st_error(ST_ERR_IO, "%s: cannot create directory: %s", tmp,
                             strerror(e));
      free(tmp);
      return s;
    }
    tmp[i] = saved;
  }
  free(tmp);
  return ST_OK;
}

/* mkdir_p(path) could succeed: its nearest existing ancestor (or path itself)
 * is a directory we may write into. Checks only; creates nothing. */
static st_status check_creatable(const char *path) {
  size_t len = strlen(path);
  char *tmp = malloc(len + 1);
  if (!tmp) return st_error(ST_ERR_NOMEM, "%s: out of memory", path);
  memcpy(tmp, path, len + 1);
  st_status s = ST_OK;
  for (;;) {
    struct stat sb;
    if (stat(tmp, &sb) == 0) {
      int e = !S_ISDIR(sb.st_mode) ? ENOTDIR : access(tmp, W_OK | X_OK) != 0 ? errno : 0;
      if (e) s = st_error(ST_ERR_IO, "%s: cannot create directory below '%s': %s", path, tmp,
                          strerror(e));
      break;
    }
    char *slash = strrchr(tmp, '/');
    if ((errno != ENOENT && errno != ENOTDIR) || !slash) break; /* "x": the cwd decides */
    if (slash == tmp) slash[1] = 0;       /* up to "/" */
    else slash[0] = 0;
  }
  free(tmp);
  return s;
}

static char *path_join(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *p = malloc(na + nb + 2);
  if (!p) return NULL;
  memcpy(p, a, na);
  p[na] = '/';
  memcpy(p + na + 1, b, nb + 1);
  return p;
}

/* One TFRecord frame around data[len]. */
static st_status write_record(st_tensorboard *tb, int run, const void *data, size_t len) {
  unsigned char head[12], tail[4];
  size_t n = 0, nt = 0;
  put_le(head, &n, (uint64_t)len, 8);
  put_le(head, &n, st_crc32c_mask(st_crc32c(0, head, 8)), 4);
  put_le(tail, &nt, st_crc32c_mask(st_crc32c(0, data, len)), 4);
  FILE *f = tb->f[run];
  if (fwrite(head, 1, n, f) != n || fwrite(data, 1, len, f) != len ||
      fwrite(tail, 1, nt, f) != nt)
    return st_error(ST_ERR_IO, "%s: write failed: %s", tb->path[run], strerror(errno));
  return ST_OK;
}

/* Create the file exclusively: <dir>/events.out.tfevents.<secs>.<host>[.k]. */
static st_status create_event_file(st_tensorboard *tb, int run, const char *dir) {
  char name[400];
  for (int k = 0; k < 100; k++) {
    if (k == 0)
      snprintf(name, sizeof name, "events.out.tfevents.%lld.%s", tb->start_seconds, tb->host);
    else
      snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d", tb->start_seconds,
               tb->host, k);
    free(tb->path[run]);
    tb->path[run] = path_join(dir, name);
    if (!tb->path[run]) return st_error(ST_ERR_NOMEM, "%s: out of memory", dir);
    tb->f[run] = fopen(tb->path[run], "wbx");
    if (tb->f[run]) return ST_OK;
    if (errno != EEXIST) break;
  }
  return st_error(ST_ERR_IO, "%s: cannot create event file: %s", tb->path[run],
                  strerror(errno));
}

/* Create <log_dir>/<run>/ and its event file, and write the file_version record. */
static st_status open_run(st_tensorboard *tb, int run) {
  char *dir = path_join(tb->log_dir, run_names[run]);
  if (!dir) return st_error(ST_ERR_NOMEM, "%s: out of memory", tb->log_dir);
  struct stat sb;
  bool had_log_dir = stat(tb->log_dir, &sb) == 0;
  tb->made_run_dir[run] = stat(dir, &sb) != 0;
  st_status s = mkdir_p(dir);
  if (!had_log_dir && s == ST_OK) tb->made_log_dir = true;
  if (s == ST_OK) s = create_event_file(tb, run, dir);
  free(dir);
  if (s != ST_OK) return s;
  static const char version[] = "brain.Event:2";
  unsigned char buf[64];
  size_t n = 0;
  put_event_head(buf, &n, wall_seconds(), 0);
  put_bytes(buf, &n, 3, version, sizeof version - 1);
  return write_record(tb, run, buf, n);
}

/* After a failed write: a run's file that holds no byte is closed and
 * removed, then the directories open_run created if they are empty. */
static void discard_if_empty(st_tensorboard *tb, int run) {
  struct stat sb;
  if (!tb->f[run] || fstat(fileno(tb->f[run]), &sb) != 0 || sb.st_size != 0) return;
  fclose(tb->f[run]);
  tb->f[run] = NULL;
  unlink(tb->path[run]);
  char *dir = tb->made_run_dir[run] ? path_join(tb->log_dir, run_names[run]) : NULL;
  if (dir && rmdir(dir) == 0) tb->made_run_dir[run] = false;
  free(dir);
  if (tb->made_log_dir && rmdir(tb->log_dir) == 0) tb->made_log_dir = false;
}

static void host_name(char *buf, size_t cap) {
  if (gethostname(buf, cap - 1) != 0 || buf[0] == 0) snprintf(buf, cap, "localhost");
  buf[cap - 1] = 0;
  for (char *p = buf; *p; p++)
    if (*p == '/') *p = '_';
}

/* ---- public API ---------------------------------------------------------- */
st_status st_tensorboard_create(const char *log_dir, st_tensorboard **out) {
  ST_REQUIRE(log_dir);
  ST_REQUIRE(out);
  *out = NULL;
  if (!log_dir || !log_dir[0])
    return st_error(ST_ERR_INVALID, "TensorBoard: empty log directory");
  st_tensorboard *tb = calloc(1, sizeof *tb);
  if (!tb) return st_error(ST_ERR_NOMEM, "%s: out of memory", log_dir);
  tb->log_dir = malloc(strlen(log_dir) + 1);
  if (!tb->log_dir) {
    free(tb);
    return st_error(ST_ERR_NOMEM, "%s: out of memory", log_dir);
  }
  strcpy(tb->log_dir, log_dir);
  tb->start_seconds = (long long)time(NULL);
  host_name(tb->host, sizeof tb->host);
  /* the runs' directories and event files are created by their first
   * scalar, so a run that fails before writing any leaves nothing behind */
  st_status s = check_creatable(log_dir);
  if (s != ST_OK) {
    st_tensorboard_destroy(tb);
    return s;
  }
  *out = tb;
  return ST_OK;
}

/* double -> float without the undefined out-of-range conversion. */
static float to_float(double v) {
  if (isfinite(v) && fabs(v) > FLT_MAX) return v > 0 ? INFINITY : -INFINITY;
  return (float)v;
}

st_status st_tensorboard_scalar(st_tensorboard *tb, bool validation, const char *tag,
                                int64_t step, double value) {
  ST_REQUIRE(tb);
  ST_REQUIRE(tag);
  size_t tag_len = tag ? strlen(tag) : 0;
  if (tag_len == 0 || tag_len > TB_MAX_TAG)
    return st_error(ST_ERR_INVALID, "TensorBoard tag \"%.40s\": length %zu not in 1..%d",
                    tag ? tag : "", tag_len, TB_MAX_TAG);
  int run = validation ? RUN_VALIDATION : RUN_TRAIN;
  if (!tb->f[run]) {
    st_status s = open_run(tb, run);
    if (s != ST_OK) return s;
  }
  unsigned char buf[TB_EVENT_CAP];
  size_t n = encode_scalar_event(buf, wall_seconds(), step, tag, tag_len, to_float(value));
  st_status s = write_record(tb, run, buf, n);
  if (s != ST_OK) discard_if_empty(tb, run);
  return s;
}

st_status st_tensorboard_flush(st_tensorboard *tb) {
  if (!tb) return st_error(ST_ERR_INVALID, "st_tensorboard_flush: tb is NULL");
  for (int r = 0; r < RUN_COUNT; r++) {
    if (!tb->f[r]) continue;
    if (fflush(tb->f[r]) != 0 || ferror(tb->f[r])) {
      st_status s = st_error(ST_ERR_IO, "%s: write failed: %s", tb->path[r], strerror(errno));
      discard_if_empty(tb, r);
      return s;
    }
  }
  return ST_OK;
}

void st_tensorboard_destroy(st_tensorboard *tb) {
  if (!tb) return;
  for (int r = 0; r < RUN_COUNT; r++) {
    if (tb->f[r] && fflush(tb->f[r]) != 0) discard_if_empty(tb, r);
    if (tb->f[r]) fclose(tb->f[r]);
    free(tb->path[r]);
  }
  free(tb->log_dir);
  free(tb);
}
