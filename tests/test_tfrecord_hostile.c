/* Hostile TFRecord input (issue 29, probe reliability-3 D4 and D6), files
 * written here with the library's writer (no binary fixtures):
 *  - D4: a record of empty feature-map entries (`0a 00` x N, a tf.train.Example
 *    bomb: protobuf-c allocated ~45x the record) is refused by the decode
 *    budget (8 x the record + 64 KiB, at most max_record_bytes + 64 KiB) with
 *    ST_ERR_FORMAT naming file and offset, or skipped and counted with
 *    skip_corrupt; legitimate large records (8 MiB of pixels, 1M packed
 *    int64s) still parse; memory stays bounded: datasets of four 63 MiB bombs
 *    read sequentially, with 4 readers and with ST_AUTOTUNE in a child under
 *    RLIMIT_AS (ulimit -v) = a control child's peak + 2 x 64 MiB + 48 MiB; the
 *    CLI (`--num-parallel-reads auto`, and 4) on those files peaks within
 *    2 x 64 MiB + 48 MiB of its RSS on the good files alone (wait4's rusage).
 *  - D6: a gzip file of two members reads whole; a damaged second member,
 *    trailing garbage, a cut member, a plain file read as GZIP: ST_ERR_FORMAT
 *    naming file, offset and compressed byte (or, skip_corrupt, the first
 *    member's records and one skipped); the CLI exits 2 on the damaged one. */
#define _GNU_SOURCE
#include "strata/data.h"

#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define MIB ((size_t)1 << 20)
#define BOMB_BYTES (63 * MIB)
#define SLACK (48 * MIB)

static char g_dir[64];

static const char *path(const char *name) {
  static char p[64][256];
  static int k;
  k = (k + 1) % 64;
  snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
  return p[k];
}

static st_example_spec spec(void) {
  st_example_spec s;
  memset(&s, 0, sizeof s);
  strcpy(s.x.name, "image");
  s.x.dtype = ST_FEATURE_UINT8;
  s.x.shape = (st_shape){3, {28, 28, 1}};
  strcpy(s.y.name, "label");
  s.y.dtype = ST_FEATURE_INT64;
  return s;
}

static void *good_example(int i, size_t *size) {
  uint8_t img[784];
  int64_t label = i % 10;
  for (int k = 0; k < 784; k++) img[k] = (uint8_t)(i * 31 + k);
  st_feature_value f[2] = {{"image", ST_FEATURE_UINT8, img, 784}, {"label", ST_FEATURE_INT64, &label, 1}};
  void *out = NULL;
  CHECK_OK(st_example_serialize(f, 2, &out, size));
  return out;
}

/* 0a <varint len> (0a 00)...: one Features message of empty map entries. */
static uint8_t *bomb(size_t bytes, size_t *size) {
  size_t n = bytes - 16, k = 0;
  uint8_t *p = malloc(bytes);
  p[k++] = 0x0a;
  for (size_t v = n; ; v >>= 7) {
    p[k++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
    if (!(v >> 7)) break;
  }
  for (size_t i = 0; i < n; i += 2) p[k + i] = 0x0a, p[k + i + 1] = 0;
  *size = k + n;
  return p;
}

/* good records 0..n-1, then (bomb_bytes > 0) one bomb. */
static void write_file(const char *p, bool gzip, int n, size_t bomb_bytes) {
  st_tfrecord_options o = st_tfrecord_default_options();
  o.compression = gzip ? ST_COMPRESSION_GZIP : ST_COMPRESSION_NONE;
  st_tfrecord_writer *w = NULL;
  CHECK_OK(st_tfrecord_writer_create(p, &o, &w));
  for (int i = 0; i < n; i++) {
    size_t sz;
    void *r = good_example(i, &sz);
    CHECK_OK(st_tfrecord_writer_write(w, r, sz));
    free(r);
  }
  if (bomb_bytes) {
    size_t sz;
    uint8_t *b = bomb(bomb_bytes, &sz);
    CHECK_OK(st_tfrecord_writer_write(w, b, sz));
    free(b);
  }
  CHECK_OK(st_tfrecord_writer_close(w));
}

static uint8_t *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  uint8_t *b = malloc(64 * MIB);
  *n = f ? fread(b, 1, 64 * MIB, f) : 0;
  if (f) fclose(f);
  return b;
}

static void put(const char *p, const void *a, size_t na, const void *b, size_t nb) {
  FILE *f = fopen(p, "wb");
  CHECK(f && fwrite(a, 1, na, f) == na && (!nb || fwrite(b, 1, nb, f) == nb));
  if (f) fclose(f);
}

/* Every element of files through a tfrecord dataset: the status, *count
 * elements, *skipped; err gets the message. */
static st_status read_all(const char **files, int n, int par, bool skip, bool gzip,
                          int64_t *count, int64_t *skipped, char *err, size_t errsz) {
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  o.spec = spec();
  o.record.skip_corrupt = skip;
  o.record.compression = gzip ? ST_COMPRESSION_GZIP : ST_COMPRESSION_NONE;
  o.cycle_length = par ? 4 : 1;
  o.num_parallel_calls = par;
  st_dataset *ds = NULL;
  st_iterator *it = NULL;
  *count = 0;
  err[0] = 0;
  st_status s = st_dataset_tfrecord(files, n, &o, &ds);
  if (s == ST_OK) s = st_dataset_iterate(ds, &it);
  for (bool end = false; s == ST_OK && !end;) {
    st_batch b;
    if ((s = st_iterator_next(it, &b, &end)) == ST_OK && !end) ++*count;
  }
  if (s != ST_OK) snprintf(err, errsz, "%s", st_last_error());
  st_iterator_destroy(it);
  *skipped = st_dataset_tfrecord_skipped(ds);
  st_dataset_destroy(ds);
  return s;
}

static void test_bomb_parse(void) {
  st_example_spec sp = spec();
  float x[784], y[1];
  size_t n;
  uint8_t *b = bomb(BOMB_BYTES, &n);
  CHECK_EQ(st_parse_example(b, n, &sp, x, y), ST_ERR_FORMAT);
  CHECK_MSG(strstr(st_last_error(), "decode budget") != NULL, "%s", st_last_error());
  free(b);
  /* legitimate large records stay within the budget */
  static uint8_t px[8 << 20];
  st_example_spec big = sp;
  big.x.shape = (st_shape){1, {8 << 20}};
  int64_t label = 3;
  st_feature_value f[2] = {{"image", ST_FEATURE_UINT8, px, sizeof px}, {"label", ST_FEATURE_INT64, &label, 1}};
  void *r;
  float *bx = malloc(sizeof px * sizeof(float));
  CHECK_OK(st_example_serialize(f, 2, &r, &n));
  CHECK_OK(st_parse_example(r, n, &big, bx, y));
  CHECK_EQ(y[0], 3.0f);
  free(r);
  int64_t *v = calloc(1 << 20, sizeof *v); /* 1M packed zeros: 1 byte in, 8 out */
  st_feature_value g[2] = {{"image", ST_FEATURE_INT64, v, 1 << 20}, {"label", ST_FEATURE_INT64, &label, 1}};
  big.x.dtype = ST_FEATURE_INT64;
  big.x.shape = (st_shape){1, {1 << 20}};
  CHECK_OK(st_example_serialize(g, 2, &r, &n));
  CHECK_OK(st_parse_example(r, n, &big, bx, y));
  free(r);
  free(v);
  free(bx);
}

static void test_bomb_dataset(void) {
  write_file(path("good.tfrecord"), false, 40, 0);
  write_file(path("bomb.tfrecord"), false, 3, 16 * MIB);
  const char *files[] = {path("good.tfrecord"), path("bomb.tfrecord"), path("good.tfrecord")};
  const int pars[] = {0, 4, ST_AUTOTUNE};
  char err[1024];
  for (int k = 0; k < 3; k++) {
    int64_t count, skipped;
    CHECK_EQ(read_all(files, 3, pars[k], false, false, &count, &skipped, err, sizeof err),
             ST_ERR_FORMAT);
    CHECK_MSG(strstr(err, "bomb.tfrecord: record at offset ") && strstr(err, "decode budget") &&
              strstr(err, "--skip-corrupt-records"), "%s", err);
    CHECK_OK(read_all(files, 3, pars[k], true, false, &count, &skipped, err, sizeof err));
    CHECK_EQ(count, 83);
    CHECK_EQ(skipped, 1);
  }
}

static long vm_peak_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmPeak:", 7)) kb = atol(line + 7);
  if (f) fclose(f);
  return kb;
}

/* The child (this binary run again: a fresh address space) under RLIMIT_AS =
 * limit bytes (0: none) reads files; exit 0 when count and skipped are as
 * expected; *peak_kb gets its VmPeak (written on its stdout). */
static int child_read(const char **files, int n, int par, size_t limit, int64_t want,
                      int64_t want_skipped, long *peak_kb) {
  int fd[2];
  if (pipe(fd)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    char env[128];
    snprintf(env, sizeof env, "%d %zu %lld %lld", par, limit, (long long)want,
             (long long)want_skipped);
    setenv("STRATA_TFR_HOSTILE_CHILD", env, 1);
    dup2(fd[1], 1);
    const char *argv[16] = {"test_tfrecord_hostile"};
    for (int i = 0; i < n && i < 14; i++) argv[i + 1] = files[i];
    execv("/proc/self/exe", (char *const *)argv);
    _exit(127);
  }
  close(fd[1]);
  char buf[64] = {0};
  ssize_t got = read(fd[0], buf, sizeof buf - 1);
  *peak_kb = got > 0 ? atol(buf) : -1;
  close(fd[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int child_main(const char *env, int n, const char **files) {
  int par;
  size_t limit;
  long long want, want_skipped;
  if (sscanf(env, "%d %zu %lld %lld", &par, &limit, &want, &want_skipped) != 4) return 2;
  mallopt(M_ARENA_MAX, 1); /* one arena: the address space does not depend on timing */
  if (limit) {
    struct rlimit r = {limit, limit};
    setrlimit(RLIMIT_AS, &r);
  }
  int64_t count, skipped;
  char err[1024];
  st_status s = read_all(files, n, par, true, true, &count, &skipped, err, sizeof err);
  printf("%ld\n", vm_peak_kb());
  fflush(stdout);
  if (s != ST_OK || count != want || skipped != want_skipped)
    fprintf(stderr, "child (par %d): %lld elements, %lld skipped: %s\n", par, (long long)count,
            (long long)skipped, err);
  return s == ST_OK && count == want && skipped == want_skipped ? 0 : 1;
}

/* The CLI's exit code and peak RSS (KiB) training on pattern. */
static int cli_run(const char *pattern, const char *par, bool skip, long *rss_kb, char *err,
                   size_t errsz) {
  const char *cli = getenv("STRATA_CLI");
  char data[512], errpath[300];
  snprintf(data, sizeof data, "tfrecord:%s", pattern);
  snprintf(errpath, sizeof errpath, "%s", path("cli.err"));
  pid_t pid = fork();
  if (pid == 0) {
    int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644), nul = open("/dev/null", O_WRONLY);
    dup2(nul, 1);
    dup2(e, 2);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    const char *argv[20] = {cli, "train", "--data", data, "--features", path("spec.json"),
                            "--model", "mlp", "--epochs", "1", "--shuffle-buffer", "0"};
    int k = 12;
    if (par) argv[k++] = "--num-parallel-reads", argv[k++] = par;
    if (skip) argv[k++] = "--skip-corrupt-records";
    execv(cli, (char *const *)argv);
    _exit(127);
  }
  int st;
  struct rusage ru;
  wait4(pid, &st, 0, &ru);
  *rss_kb = ru.ru_maxrss;
  size_t n;
  uint8_t *b = slurp(errpath, &n);
  snprintf(err, errsz, "%.*s", (int)(n < errsz ? n : errsz - 1), (char *)b);
  free(b);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_bomb_memory(void) {
  if (SANITIZED) {
    printf("# sanitizer build: memory bounds not checked\n");
    return;
  }
  write_file(path("g.tfrecord.gz"), true, 100, 0);
  for (int i = 0; i < 4; i++) {
    char name[64];
    snprintf(name, sizeof name, "b-%d.tfrecord.gz", i);
    write_file(path(name), true, 5, BOMB_BYTES);
  }
  const char *good[] = {path("g.tfrecord.gz"), path("g.tfrecord.gz"), path("g.tfrecord.gz"),
                        path("g.tfrecord.gz"), path("g.tfrecord.gz")};
  const char *bombs[] = {path("b-0.tfrecord.gz"), path("b-1.tfrecord.gz"), path("b-2.tfrecord.gz"),
                         path("b-3.tfrecord.gz"), path("g.tfrecord.gz")};
  const int pars[] = {0, 4, ST_AUTOTUNE};
  for (int k = 0; k < 3; k++) {
    long control, peak;
    CHECK_EQ(child_read(good, 5, pars[k], 0, 500, 0, &control), 0);
    size_t limit = (size_t)control * 1024 + 2 * 64 * MIB + SLACK;
    int rc = child_read(bombs, 5, pars[k], limit, 120, 4, &peak);
    CHECK_MSG(rc == 0, "par %d: four 63 MiB bombs under RLIMIT_AS %zu MiB (control peak %ld "
              "MiB): exit %d, VmPeak %ld MiB", pars[k], limit >> 20, control >> 10, rc, peak >> 10);
    printf("# par %d: VmPeak %ld MiB with the bombs, %ld MiB on good files (limit %zu MiB)\n",
           pars[k], peak >> 10, control >> 10, limit >> 20);
  }
  const char *cli = getenv("STRATA_CLI");
  if (!cli || access(cli, X_OK)) {
    printf("# STRATA_CLI not set: the CLI's RSS not checked\n");
    return;
  }
  FILE *f = fopen(path("spec.json"), "w");
  fprintf(f, "{\"x\": {\"name\": \"image\", \"dtype\": \"uint8\", \"shape\": [28, 28, 1]},"
             " \"y\": {\"name\": \"label\", \"dtype\": \"int64\"}}\n");
  fclose(f);
  const char *cpars[] = {NULL, "4", "auto"};
  char err[4096];
  for (int k = 0; k < 3; k++) {
    long control, rss;
    CHECK_EQ(cli_run(path("g.tfrecord.gz"), cpars[k], true, &control, err, sizeof err), 0);
    int rc = cli_run(path("b-*.tfrecord.gz"), cpars[k], true, &rss, err, sizeof err);
    CHECK_MSG(rc == 0 && strstr(err, " 20 examples") && strstr(err, "4 damaged records skipped"),
              "CLI %s: exit %d: %s", cpars[k] ? cpars[k] : "sequential", rc, err);
    CHECK_MSG((size_t)rss * 1024 <= (size_t)control * 1024 + 2 * 64 * MIB + SLACK,
              "CLI %s: peak RSS %ld MiB on the bombs, %ld MiB on the good file",
              cpars[k] ? cpars[k] : "sequential", rss >> 10, control >> 10);
    printf("# CLI --num-parallel-reads %s: peak RSS %ld MiB with the bombs, %ld MiB without\n",
           cpars[k] ? cpars[k] : "(none)", rss >> 10, control >> 10);
    rc = cli_run(path("b-0.tfrecord.gz"), cpars[k], false, &rss, err, sizeof err);
    CHECK_MSG(rc == 2 && strstr(err, "b-0.tfrecord.gz: record at offset ") &&
              strstr(err, "decode budget"), "CLI: exit %d: %s", rc, err);
  }
}

static void test_gzip_members(void) {
  write_file(path("a.gz"), true, 10, 0);
  write_file(path("b.gz"), true, 7, 0);
  size_t na, nb;
  uint8_t *a = slurp(path("a.gz"), &na), *b = slurp(path("b.gz"), &nb);
  put(path("ab.gz"), a, na, b, nb);
  b[0] ^= 1;
  put(path("a-bad.gz"), a, na, b, nb);
  put(path("a-zeros.gz"), a, na, "\0\0\0\0", 4);
  put(path("a-cut.gz"), a, na - 9, NULL, 0);
  put(path("empty.gz"), "", 0, NULL, 0);
  write_file(path("plain.tfrecord"), false, 3, 0);
  char err[1024], at[64];
  snprintf(at, sizeof at, "at compressed byte %zu", na);
  int64_t count, skipped;
  const char *f1[1];
  for (int par = 0; par <= 4; par += 4) {
    f1[0] = path("ab.gz");
    CHECK_OK(read_all(f1, 1, par, false, true, &count, &skipped, err, sizeof err));
    CHECK_EQ(count, 17);
    f1[0] = path("a-bad.gz");
    CHECK_EQ(read_all(f1, 1, par, false, true, &count, &skipped, err, sizeof err), ST_ERR_FORMAT);
    CHECK_MSG(strstr(err, "a-bad.gz: offset ") && strstr(err, at) &&
              strstr(err, "what follows gzip member 1 is not a gzip member"), "%s", err);
    CHECK_OK(read_all(f1, 1, par, true, true, &count, &skipped, err, sizeof err));
    CHECK_EQ(count, 10);
    CHECK_EQ(skipped, 1);
    f1[0] = path("a-zeros.gz");
    CHECK_EQ(read_all(f1, 1, par, false, true, &count, &skipped, err, sizeof err), ST_ERR_FORMAT);
    CHECK_MSG(strstr(err, at) != NULL, "%s", err);
    f1[0] = path("a-cut.gz");
    CHECK_EQ(read_all(f1, 1, par, false, true, &count, &skipped, err, sizeof err), ST_ERR_FORMAT);
    CHECK_MSG(strstr(err, "a-cut.gz: offset ") && strstr(err, "gzip stream damaged"), "%s", err);
    f1[0] = path("empty.gz");
    CHECK_OK(read_all(f1, 1, par, false, true, &count, &skipped, err, sizeof err));
    CHECK_EQ(count, 0);
    f1[0] = path("plain.tfrecord");
    CHECK_EQ(read_all(f1, 1, par, false, true, &count, &skipped, err, sizeof err), ST_ERR_FORMAT);
    CHECK_MSG(strstr(err, "plain.tfrecord: offset 0: gzip stream damaged at compressed byte 0: the file is not a gzip member") !=
              NULL, "%s", err);
  }
  free(a);
  free(b);
  const char *cli = getenv("STRATA_CLI");
  if (!cli || access(cli, X_OK)) return;
  FILE *f = fopen(path("spec.json"), "w");
  fprintf(f, "{\"x\": {\"name\": \"image\", \"dtype\": \"uint8\", \"shape\": [28, 28, 1]},"
             " \"y\": {\"name\": \"label\", \"dtype\": \"int64\"}}\n");
  fclose(f);
  rename(path("a-bad.gz"), path("two.tfrecord.gz"));
  long rss;
  char cerr[4096];
  int rc = cli_run(path("two.tfrecord.gz"), NULL, false, &rss, cerr, sizeof cerr);
  CHECK_MSG(rc == 2 && strstr(cerr, "two.tfrecord.gz: offset ") && strstr(cerr, at), "CLI: exit %d: %s",
            rc, cerr);
}

int main(int argc, char **argv) {
  if (getenv("STRATA_TFR_HOSTILE_CHILD"))
    return child_main(getenv("STRATA_TFR_HOSTILE_CHILD"), argc - 1, (const char **)argv + 1);
  snprintf(g_dir, sizeof g_dir, "/tmp/strata_tfr_hostile.XXXXXX");
  if (!mkdtemp(g_dir)) check_skip("cannot create a temp dir");
  static const check_case cases[] = {CHECK_CASE(test_bomb_parse), CHECK_CASE(test_bomb_dataset),
                                     CHECK_CASE(test_gzip_members), CHECK_CASE(test_bomb_memory)};
  int rc = CHECK_MAIN(argc, argv, cases);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return rc;
}
