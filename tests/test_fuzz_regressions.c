/* Replays every seed (tests/fuzz/corpus/<target>/) and every input a fuzzer
 * once crashed on (tests/fuzz/regressions/<target>/) through the fuzz targets'
 * entry points, compiled here without libFuzzer. A plain build checks nothing
 * crashes; the ASan + UBSan build (`make asan-test`) checks memory too. */
#define _DEFAULT_SOURCE
#define STRATA_FUZZ_NO_MAIN
#include <dirent.h>

#include "check.h"
#include "fuzz/checkpoint_fuzz.c"
#include "fuzz/cli_args_fuzz.c"
#include "fuzz/csv_fuzz.c"
#include "fuzz/idx_fuzz.c"
#include "fuzz/keras_json_fuzz.c"
#include "fuzz/ps_frame_fuzz.c"
#include "fuzz/ps_job_fuzz.c"
#include "fuzz/safetensors_fuzz.c"
#include "fuzz/tfrecord_fuzz.c"
#include "fuzz/tokens_fuzz.c"
#include "fuzz/tf_config_fuzz.c"

typedef struct fuzz_target {
  const char *name;
  int (*fn)(const uint8_t *, size_t);
} fuzz_target;

static const fuzz_target targets[] = {
    {"idx_fuzz", st_fuzz_idx},
    {"csv_fuzz", st_fuzz_csv},
    {"keras_json_fuzz", st_fuzz_keras_json},
    {"safetensors_fuzz", st_fuzz_safetensors},
    {"checkpoint_fuzz", st_fuzz_checkpoint},
    {"cli_args_fuzz", st_fuzz_cli_args},
    {"tfrecord_fuzz", st_fuzz_tfrecord},
    {"tf_config_fuzz", st_fuzz_tf_config},
    {"ps_frame_fuzz", st_fuzz_ps_frame},
    {"ps_job_fuzz", st_fuzz_ps_job},
    {"tokens_fuzz", st_fuzz_tokens},
};

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir through fn, in name order; returns the count. */
static int replay_dir(const char *dir, const fuzz_target *t) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  char *names[4096];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < 4096;)
    if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], by_name);
  int count = 0;
  for (int i = 0; i < n; i++) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    free(names[i]);
    FILE *f = fopen(p, "rb");
    if (!f) continue;
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + len, 1, cap - len, f)) > 0;) {
      len += k;
      if (len == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    CHECK_MSG(buf != NULL, "%s: out of memory", p);
    if (!buf) continue;
    CHECK_MSG(t->fn(buf, len) == 0, "%s: target returned non-zero", p);
    free(buf);
    count++;
  }
  return count;
}

/* Every target's seed corpus and regression inputs. */
static void test_replay(void) {
  const char *src = getenv("STRATA_SOURCE_DIR");
  if (!src) src = ".";
  int total = 0;
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", src, targets[i].name);
    int seeds = replay_dir(dir, &targets[i]);
    snprintf(dir, sizeof dir, "%s/tests/fuzz/regressions/%s", src, targets[i].name);
    int regs = replay_dir(dir, &targets[i]);
    fprintf(stderr, "%-18s %3d seeds, %3d regression inputs\n", targets[i].name, seeds, regs);
    CHECK_MSG(seeds > 0, "%s: no seed corpus found under %s/tests/fuzz/corpus", targets[i].name, src);
    total += seeds + regs;
  }
  CHECK(total > 0);
}
static const check_case cases[] = {CHECK_CASE(test_replay)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
