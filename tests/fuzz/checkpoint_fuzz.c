/* libFuzzer target: checkpoint restore (st_checkpoint_restore).
 * Once per process: a small compiled model (input 5 -> Dense 4 relu -> Dense 3,
 * Adam, so two optimizer slots per variable) and a valid checkpoint of it in a
 * scratch directory. Per input, the first byte picks ONE file of that
 * checkpoint to replace with the rest of the input:
 *   bits 0-1: 0 weights.safetensors, 1 optimizer.safetensors, 2 state.json,
 *             3 latest;
 *   bit 2:    "fix the checksums" so the input gets past the CRC32C checks and
 *             reaches the checks behind them: for a safetensors file,
 *             state.json gets the new file CRC and (when the file parses) each
 *             tensor's CRC; for state.json (when it is a JSON object) its
 *             state_crc32c is recomputed; for latest, the input (up to the
 *             first NUL or newline) is the name and its CRC is appended;
 *   bit 3:    with bits 2 and state.json: the "files" and "tensors" CRC maps
 *             are taken from the pristine state.json first, so a state.json
 *             (from another run of the same model) gets past every checksum
 *             and its position, schedule and history fields are fuzzed.
 * then restores into the model and puts the pristine files back. */
#include <jansson.h>

#include "fuzz_common.h"
#include "strata/train.h"
#include "io/checkpoint.h"

static const char *const ckpt_fuzz_names_[4] = {"weights.safetensors", "optimizer.safetensors",
                                               "state.json", "latest"};

static struct {
  int ready;
  st_model *model;
  char root[512];       /* the checkpoint directory (holds latest) */
  char paths[4][1200];  /* the four files */
  unsigned char *pristine[4];
  size_t pristine_len[4];
} ckpt_fuzz_;

static unsigned char *ckpt_fuzz_slurp_(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    abort();
  }
  size_t cap = 1 << 12, n = 0;
  unsigned char *buf = malloc(cap);
  for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += k;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) abort();
  *len = n;
  return buf;
}

static void ckpt_fuzz_remove_tree_(const char *dir, const char *sub) {
  char p[1400];
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", sub, ckpt_fuzz_names_[i]);
    unlink(p);
  }
  rmdir(sub);
  snprintf(p, sizeof p, "%s/latest", dir);
  unlink(p);
  rmdir(dir);
}

static void ckpt_fuzz_cleanup_(void) {
  if (!ckpt_fuzz_.ready) return;
  char sub[1200];
  snprintf(sub, sizeof sub, "%s", ckpt_fuzz_.paths[0]);
  char *slash = strrchr(sub, '/');
  if (slash) *slash = 0;
  ckpt_fuzz_remove_tree_(ckpt_fuzz_.root, sub);
  for (int i = 0; i < 4; i++) free(ckpt_fuzz_.pristine[i]);
  st_model_destroy(ckpt_fuzz_.model);
  memset(&ckpt_fuzz_, 0, sizeof ckpt_fuzz_);
}

static void ckpt_fuzz_setup_(void) {
  if (ckpt_fuzz_.ready) return;
  st_fuzz_init_once();
  snprintf(ckpt_fuzz_.root, sizeof ckpt_fuzz_.root, "%s/strata-fuzz-ckpt-XXXXXX", st_fuzz_tmpdir());
  if (!mkdtemp(ckpt_fuzz_.root)) {
    perror(ckpt_fuzz_.root);
    abort();
  }
  st_model_options mo = st_model_default_options(st_shape1(5));
  mo.seed = 1;
  st_model *m = NULL;
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  st_checkpoint_options ko = st_checkpoint_default_options();
  st_layer *l = NULL;
  if (st_sequential_create(&mo, &m) != ST_OK || st_dense(4, ST_ACT_RELU, &l) != ST_OK ||
      st_model_add(m, l) != ST_OK || st_dense(3, ST_ACT_LINEAR, &l) != ST_OK ||
      st_model_add(m, l) != ST_OK || st_model_compile(m, &co) != ST_OK ||
      st_checkpoint_save(m, ckpt_fuzz_.root, &ko) != ST_OK) {
    fprintf(stderr, "checkpoint_fuzz setup: %s\n", st_last_error());
    abort();
  }
  char sub[1024];
  if (st_checkpoint_latest(ckpt_fuzz_.root, sub, sizeof sub) != ST_OK) abort();
  for (int i = 0; i < 3; i++)
    snprintf(ckpt_fuzz_.paths[i], sizeof ckpt_fuzz_.paths[i], "%s/%s", sub, ckpt_fuzz_names_[i]);
  snprintf(ckpt_fuzz_.paths[3], sizeof ckpt_fuzz_.paths[3], "%s/latest", ckpt_fuzz_.root);
  for (int i = 0; i < 4; i++)
    ckpt_fuzz_.pristine[i] = ckpt_fuzz_slurp_(ckpt_fuzz_.paths[i], &ckpt_fuzz_.pristine_len[i]);
  ckpt_fuzz_.model = m;
  ckpt_fuzz_.ready = 1;
  /* The pristine checkpoint must restore, or the target fuzzes nothing. */
  if (st_checkpoint_restore(m, ckpt_fuzz_.root) != ST_OK) {
    fprintf(stderr, "checkpoint_fuzz setup: restore: %s\n", st_last_error());
    abort();
  }
  atexit(ckpt_fuzz_cleanup_);
}

/* state.json (pristine) with file's CRC, and its tensors' CRCs, updated. */
static void ckpt_fuzz_fix_file_crcs_(int which, const uint8_t *data, size_t size) {
  json_t *state = json_loadb((const char *)ckpt_fuzz_.pristine[2], ckpt_fuzz_.pristine_len[2], 0, NULL);
  if (!state) abort();
  json_object_set_new(json_object_get(state, "files"), ckpt_fuzz_names_[which],
                      json_integer((json_int_t)st_crc32c(0, data, size)));
  st_safetensors s;
  memset(&s, 0, sizeof s);
  if (st__safetensors_read(ckpt_fuzz_.paths[which], &s) == ST_OK) {
    json_t *map = json_object();
    for (int i = 0; i < s.n; i++) {
      size_t cnt = 1;
      for (int d = 0; d < s.tensors[i].rank; d++) cnt *= (size_t)s.tensors[i].dims[d];
      json_object_set_new(map, s.tensors[i].name,
                          json_integer((json_int_t)st_crc32c(0, s.tensors[i].data, cnt * 4)));
    }
    json_object_set_new(json_object_get(state, "tensors"), which == 0 ? "weights" : "optimizer", map);
  }
  st__safetensors_free(&s);
  json_object_set_new(state, "state_crc32c", json_integer(st__ckpt_state_crc(state)));
  char *text = json_dumps(state, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
  json_decref(state);
  if (!text) abort();
  st_fuzz_write_path(ckpt_fuzz_.paths[2], text, strlen(text));
  free(text);
}

int st_fuzz_checkpoint(const uint8_t *data, size_t size) {
  ckpt_fuzz_setup_();
  if (size == 0) return 0;
  uint8_t sel = data[0];
  int which = sel & 3, fix = (sel >> 2) & 1;
  data++, size--;
  if (!fix || which < 2) st_fuzz_write_path(ckpt_fuzz_.paths[which], data, size);
  if (fix && which < 2) ckpt_fuzz_fix_file_crcs_(which, data, size);
  if (fix && which == 2) {
    json_t *o = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    char *text = NULL;
    if (json_is_object(o)) {
      if (sel & 8) {
        json_t *pristine = json_loadb((const char *)ckpt_fuzz_.pristine[2],
                                      ckpt_fuzz_.pristine_len[2], 0, NULL);
        if (!pristine) abort();
        json_object_set(o, "files", json_object_get(pristine, "files"));
        json_object_set(o, "tensors", json_object_get(pristine, "tensors"));
        json_decref(pristine);
      }
      json_object_set_new(o, "state_crc32c", json_integer(st__ckpt_state_crc(o)));
      text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    }
    json_decref(o);
    if (text)
      st_fuzz_write_path(ckpt_fuzz_.paths[2], text, strlen(text));
    else
      st_fuzz_write_path(ckpt_fuzz_.paths[2], data, size);
    free(text);
  }
  if (fix && which == 3) {
    char name[128], line[160];
    size_t n = 0;
    while (n < size && n < sizeof name - 1 && data[n] != 0 && data[n] != '\n') n++;
    memcpy(name, data, n);
    name[n] = 0;
    int len = snprintf(line, sizeof line, "%s %08x\n", name, st_crc32c(0, name, n));
    st_fuzz_write_path(ckpt_fuzz_.paths[3], line, (size_t)len);
  }

  (void)st_checkpoint_restore(ckpt_fuzz_.model, ckpt_fuzz_.root);

  for (int i = 0; i < 4; i++)
    if (i == which || (fix && which < 2 && i == 2))
      st_fuzz_write_path(ckpt_fuzz_.paths[i], ckpt_fuzz_.pristine[i], ckpt_fuzz_.pristine_len[i]);
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return st_fuzz_checkpoint(data, size);
}
#endif
