/* TensorBoard event files and CRC-32C: st_crc32c against a bitwise reference
 * (check value, incremental use, masked form, table vs hardware path); event
 * files written through the API and through the callback, decoded by the
 * independent reader tests/tb_decode.py (its own CRC-32C and protobuf
 * decoding); one flipped byte must be reported as a CRC error. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "check.h"
#include "strata/train.h"

#define PYTHON "/usr/bin/python3"

/* ---- CRC-32C ------------------------------------------------------------- */
/* Bit by bit, straight from the definition (reflected poly 0x82F63B78). */
static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

static uint32_t mask_ref(uint32_t c) {
  uint32_t rot = (c >> 15) | (c << 17); /* rotate right by 15 */
  return rot + 0xA282EAD8u;
}

static void test_crc(void) {
  CHECK(st_crc32c(0, "123456789", 9) == 0xE3069283u);
  CHECK(st__crc32c_portable(0, "123456789", 9) == 0xE3069283u);
  CHECK(crc_bitwise((const unsigned char *)"123456789", 9) == 0xE3069283u);
  CHECK(st_crc32c(0, NULL, 0) == 0);
  /* masked: literals from the bitwise CRC and TensorFlow's formula */
  CHECK(st_crc32c_mask(0) == 0xA282EAD8u);
  CHECK(st_crc32c_mask(st_crc32c(0, "123456789", 9)) == 0xC78AB0E5u);
  unsigned char zeros[8] = {0};
  CHECK(st_crc32c(0, zeros, 8) == 0x8C28B28Au);
  CHECK(st_crc32c_mask(st_crc32c(0, zeros, 8)) == 0x07980329u);

  unsigned char buf[1100];
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < sizeof buf; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = (unsigned char)x;
  }
  int bad = 0, bad_mask = 0, bad_split = 0;
  for (size_t off = 0; off < 8; off++)
    for (size_t n = 0; n + off <= sizeof buf; n += (n < 80 ? 1 : 37)) {
      uint32_t ref = crc_bitwise(buf + off, n);
      bad += st_crc32c(0, buf + off, n) != ref;
      bad += st__crc32c_portable(0, buf + off, n) != ref;
      bad_mask += st_crc32c_mask(st_crc32c(0, buf + off, n)) != mask_ref(ref);
      size_t a = n / 3, b = n - n / 5; /* three pieces, continued */
      uint32_t c = st_crc32c(0, buf + off, a);
      c = st__crc32c_portable(c, buf + off + a, b - a);
      c = st_crc32c(c, buf + off + b, n - b);
      bad_split += c != ref;
    }
  CHECK_MSG(bad == 0, "%d lengths/offsets disagree with the bitwise CRC", bad);
  CHECK_MSG(bad_mask == 0, "%d masked values disagree", bad_mask);
  CHECK_MSG(bad_split == 0, "%d incremental CRCs disagree", bad_split);
  fprintf(stderr, "crc32c: hardware path %s\n", st__crc32c_hardware() ? "used" : "not used");
}

/* ---- decoding with tb_decode.py ------------------------------------------- */
typedef struct rec {
  char run[32], tag[64];
  long long step;
  double value;
  bool is_version;
  char version[32];
} rec;

/* Value of "key": in a JSON line as a string (quoted) or number text. */
static bool json_field(const char *line, const char *key, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(line, pat);
  if (!p) return false;
  p += strlen(pat);
  bool quoted = *p == '"';
  if (quoted) p++;
  size_t n = 0;
  while (*p && n + 1 < cap && (quoted ? *p != '"' : (*p != ',' && *p != '}'))) out[n++] = *p++;
  out[n] = 0;
  return true;
}

static const char *decoder_path(void) {
  static char path[4096];
  const char *src = getenv("STRATA_SOURCE_DIR");
  if (src) {
    snprintf(path, sizeof path, "%s/tests/tb_decode.py", src);
  } else { /* run by hand: CMake passes absolute source paths */
    snprintf(path, sizeof path, "%s", __FILE__);
    char *slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, sizeof path - (slash ? (size_t)(slash + 1 - path) : 0),
             "tb_decode.py");
  }
  return path;
}

/* Run the decoder on dir; records into recs[cap] (count in *n), stderr+stdout
 * text (non-JSON lines) into err. Returns the exit status. */
static int decode(const char *dir, rec *recs, int cap, int *n, char *err, size_t errcap) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "%s '%s' '%s' 2>&1", PYTHON, decoder_path(), dir);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[1024], field[128];
  *n = 0;
  err[0] = 0;
  while (fgets(line, sizeof line, p)) {
    if (line[0] != '{') {
      strncat(err, line, errcap - strlen(err) - 1);
      continue;
    }
    if (*n >= cap) continue;
    rec *r = &recs[(*n)++];
    memset(r, 0, sizeof *r);
    json_field(line, "run", r->run, sizeof r->run);
    if (json_field(line, "file_version", r->version, sizeof r->version)) {
      r->is_version = true;
      continue;
    }
    json_field(line, "tag", r->tag, sizeof r->tag);
    if (json_field(line, "step", field, sizeof field)) r->step = atoll(field);
    if (json_field(line, "value", field, sizeof field)) r->value = strtod(field, NULL);
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Exactly one scalar (run, tag, step) with the float-rounded value. */
static int count_scalar(const rec *recs, int n, const char *run, const char *tag,
                        long long step, double value) {
  int found = 0;
  for (int i = 0; i < n; i++)
    if (!recs[i].is_version && !strcmp(recs[i].run, run) && !strcmp(recs[i].tag, tag) &&
        recs[i].step == step && recs[i].value == (double)(float)value)
      found++;
  return found;
}

#define CHECK_SCALAR(recs, n, run, tag, step, value)                          \
  CHECK_MSG(count_scalar(recs, n, run, tag, step, value) == 1,              \
            "%s/%s step %lld = %g not found exactly once", run, tag,        \
            (long long)(step), (double)(value))

static int count_run(const rec *recs, int n, const char *run, bool versions) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!strcmp(recs[i].run, run) && recs[i].is_version == versions &&
        (!versions || !strcmp(recs[i].version, "brain.Event:2")))
      k++;
  return k;
}

/* The single event file of dir/run: its path into out; checks its name. */
static bool event_file(const char *dir, const char *run, long long t0, long long t1,
                       char *out, size_t cap) {
  char d[3000], host[256] = "";
  snprintf(d, sizeof d, "%s/%s", dir, run);
  gethostname(host, sizeof host - 1);
  DIR *dp = opendir(d);
  if (!dp) return false;
  int files = 0;
  struct dirent *e;
  while ((e = readdir(dp))) {
    if (e->d_name[0] == '.') continue;
    files++;
    long long t = 0;
    int used = 0;
    bool ok = sscanf(e->d_name, "events.out.tfevents.%lld.%n", &t, &used) == 1 && used > 0 &&
              t >= t0 && t <= t1 && !strcmp(e->d_name + used, host);
    CHECK_MSG(ok, "unexpected event file name %s/%s (host %s)", d, e->d_name, host);
    snprintf(out, cap, "%s/%s", d, e->d_name);
  }
  closedir(dp);
  CHECK_MSG(files == 1, "%s: %d files, expected 1", d, files);
  return files == 1;
}

/* ---- writing ------------------------------------------------------------- */
static void write_api(const char *dir) {
  st_tensorboard *tb = NULL;
  CHECK_OK(st_tensorboard_create(dir, &tb));
  if (!tb) return;
  CHECK_OK(st_tensorboard_scalar(tb, false, "loss", 0, 0.5));
  CHECK_OK(st_tensorboard_scalar(tb, false, "loss", 1, 0.25));
  CHECK_OK(st_tensorboard_scalar(tb, false, "loss", 1LL << 40, 1e-3));
  CHECK_OK(st_tensorboard_scalar(tb, false, "neg/step", -5, -2.5));
  CHECK_OK(st_tensorboard_scalar(tb, false, "zero", 7, 0.0));
  CHECK_OK(st_tensorboard_flush(tb));
  CHECK_OK(st_tensorboard_scalar(tb, true, "acc", 3, 0.75));
  CHECK(st_tensorboard_scalar(tb, false, "", 1, 1.0) == ST_ERR_INVALID);
  char longtag[300];
  memset(longtag, 'x', sizeof longtag - 1);
  longtag[sizeof longtag - 1] = 0;
  CHECK(st_tensorboard_scalar(tb, false, longtag, 1, 1.0) == ST_ERR_INVALID);
  st_tensorboard_destroy(tb);
  st_tensorboard_destroy(NULL);
}

static void check_api(const char *dir, rec *recs, int n) {
  CHECK(count_run(recs, n, "train", true) == 1);
  CHECK(count_run(recs, n, "validation", true) == 1);
  CHECK(recs[0].is_version); /* first record of the (sorted-first) train file */
  CHECK_SCALAR(recs, n, "train", "loss", 0, 0.5);
  CHECK_SCALAR(recs, n, "train", "loss", 1, 0.25);
  CHECK_SCALAR(recs, n, "train", "loss", 1LL << 40, 1e-3);
  CHECK_SCALAR(recs, n, "train", "neg/step", -5, -2.5);
  CHECK_SCALAR(recs, n, "train", "zero", 7, 0.0);
  CHECK_SCALAR(recs, n, "validation", "acc", 3, 0.75);
  CHECK(count_run(recs, n, "train", false) == 5);
  CHECK(count_run(recs, n, "validation", false) == 1);
}

static void write_callback(const char *dir) {
  st_tensorboard *tb = NULL;
  CHECK_OK(st_tensorboard_create(dir, &tb));
  if (!tb) return;
  st_callback cb;
  CHECK_OK(st_tensorboard_callback_create(tb, 3, &cb));
  CHECK(cb.user != NULL && cb.destroy && cb.on_batch_end && cb.on_epoch_end);
  for (int e = 0; e < 2; e++) {
    if (cb.on_epoch_begin) CHECK_OK(cb.on_epoch_begin(cb.user, NULL, e));
    for (int s = 0; s < 4; s++) { /* global steps 1..8; written at 3 and 6 */
      st_batch_logs bl = {.epoch = e, .step = s, .steps = 4,
                          .loss = 1.0 / (e * 4 + s + 1), .accuracy = 0.1 * (e * 4 + s)};
      CHECK_OK(cb.on_batch_end(cb.user, NULL, &bl));
    }
    st_epoch_logs el = {.epoch = e, .loss = 0.5 - 0.1 * e, .accuracy = 0.8 + 0.05 * e,
                        .has_validation = e == 0, .val_loss = 0.6, .val_accuracy = 0.7,
                        .lr = 1e-3 / (e + 1), .seconds = 2.0, .steps = 4, .examples = 256};
    CHECK_OK(cb.on_epoch_end(cb.user, NULL, &el));
  }
  st_callback_destroy(&cb);
  st_tensorboard_destroy(tb);
}

static void check_callback(rec *recs, int n) {
  CHECK_SCALAR(recs, n, "train", "batch_loss", 3, 1.0 / 3);
  CHECK_SCALAR(recs, n, "train", "batch_accuracy", 3, 0.1 * 2);
  CHECK_SCALAR(recs, n, "train", "batch_loss", 6, 1.0 / 6);
  CHECK_SCALAR(recs, n, "train", "batch_accuracy", 6, 0.1 * 5);
  for (int e = 0; e < 2; e++) {
    CHECK_SCALAR(recs, n, "train", "epoch_loss", e, 0.5 - 0.1 * e);
    CHECK_SCALAR(recs, n, "train", "epoch_accuracy", e, 0.8 + 0.05 * e);
    CHECK_SCALAR(recs, n, "train", "epoch_learning_rate", e, 1e-3 / (e + 1));
    CHECK_SCALAR(recs, n, "train", "epoch_samples_per_sec", e, 128.0);
  }
  CHECK_SCALAR(recs, n, "validation", "epoch_loss", 0, 0.6);
  CHECK_SCALAR(recs, n, "validation", "epoch_accuracy", 0, 0.7);
  CHECK(count_run(recs, n, "train", false) == 4 + 8);
  CHECK(count_run(recs, n, "validation", false) == 2);
  CHECK(count_run(recs, n, "validation", true) == 1);
}

/* ---- corruption and errors ----------------------------------------------- */
static void flip_byte(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  if (!f) return;
  fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
  int c = fgetc(f);
  fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
  fputc(c ^ 0x10, f);
  fclose(f);
}

static void check_corruption(const char *dir, const char *file) {
  rec recs[64];
  int n;
  char err[4096];
  flip_byte(file, -10); /* inside the last record's data */
  int rc = decode(dir, recs, 64, &n, err, sizeof err);
  CHECK_MSG(rc == 1 && strstr(err, "data CRC mismatch"), "rc %d: %s", rc, err);
  flip_byte(file, -10); /* restore */
  CHECK(decode(dir, recs, 64, &n, err, sizeof err) == 0);
  flip_byte(file, 2); /* the first record's length */
  rc = decode(dir, recs, 64, &n, err, sizeof err);
  CHECK_MSG(rc == 1 && strstr(err, "length CRC mismatch"), "rc %d: %s", rc, err);
  flip_byte(file, 2);
  CHECK(truncate(file, 30) == 0); /* cut inside a frame */
  rc = decode(dir, recs, 64, &n, err, sizeof err);
  CHECK_MSG(rc == 1 && strstr(err, "truncated"), "rc %d: %s", rc, err);
}

static void check_open_errors(const char *tmp) {
  char file[4096], sub[4200];
  snprintf(file, sizeof file, "%s/plainfile", tmp);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  snprintf(sub, sizeof sub, "%s/logs", file);
  st_tensorboard *tb = (st_tensorboard *)1;
  CHECK(st_tensorboard_create(sub, &tb) == ST_ERR_IO);
  CHECK(tb == NULL);
  CHECK_MSG(strstr(st_last_error(), "plainfile") != NULL, "%s", st_last_error());
  CHECK(st_tensorboard_create("", &tb) == ST_ERR_INVALID);
}

/* The API's and the callback's event files read back by tests/tb_decode.py
 * (an independent decoder), then corruption and open errors. */
static void test_decoded(void) {
  if (access(PYTHON, X_OK) != 0) {
    if (check_failures_) return;
    check_skip(PYTHON " not found: cannot run the independent decoder tests/tb_decode.py");
  }
  char tmp[] = "/tmp/strata_tb_XXXXXX", dir_api[256], dir_cb[256], file[4096];
  CHECK(mkdtemp(tmp) != NULL);
  snprintf(dir_api, sizeof dir_api, "%s/a/b/logs", tmp); /* mkdir -p */
  snprintf(dir_cb, sizeof dir_cb, "%s/cb/", tmp);        /* trailing slash */
  long long t0 = (long long)time(NULL);
  write_api(dir_api);
  write_callback(dir_cb);
  long long t1 = (long long)time(NULL);

  static rec recs[256];
  int n = 0;
  char err[4096];
  int rc = decode(dir_api, recs, 256, &n, err, sizeof err);
  CHECK_MSG(rc == 0, "decoder exit %d: %s", rc, err);
  check_api(dir_api, recs, n);
  rc = decode(dir_cb, recs, 256, &n, err, sizeof err);
  CHECK_MSG(rc == 0, "decoder exit %d: %s", rc, err);
  check_callback(recs, n);

  CHECK(event_file(dir_cb, "validation", t0, t1, file, sizeof file));
  if (event_file(dir_api, "train", t0, t1, file, sizeof file)) check_corruption(dir_api, file);
  check_open_errors(tmp);

  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  CHECK(system(cmd) == 0);
}
static const check_case cases[] = {CHECK_CASE(test_crc), CHECK_CASE(test_decoded)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
