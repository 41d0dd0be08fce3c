/* One checkpoint: ckpt-<seq>/ holding weights.safetensors (the variables),
 * optimizer.safetensors (the slots, "<layer>/<param>/<slot>") and state.json
 * (position, logs, optimizer and schedule, a CRC32C per tensor and per file,
 * and a CRC32C of the state itself). Saving writes a temporary directory,
 * fsyncs it and renames it into place before `latest` moves; restoring checks
 * everything before the model changes (checkpoint_restore.c). The
 * ModelCheckpoint callback over it is in src/train/callbacks.c. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "io/checkpoint.h"
#include "io/checkpoint_io.h"

#define CKPT_FORMAT "strata-checkpoint"
#define CKPT_VERSION 1
#define STATE_MAX (64u << 20)

static const char *slot_name(const st_model *m, int k) {
  switch (m->net.optimizer.kind) {
    case ST_OPT_ADAM:
    case ST_OPT_ADAMW: return k == 0 ? "m" : "v";
    case ST_OPT_RMSPROP: return k == 0 ? "rms" : "momentum";
    default: return "velocity";
  }
}

st_checkpoint_options st_checkpoint_default_options(void) {
  st_checkpoint_options o = {3, 0};
  return o;
}

/* ---- saving ---- */

st_status st__ckpt_file_crc(const char *path, uint32_t *crc) {
  int fd = -1;
  st_status s = st__open_input(path, &fd, NULL);
  if (s != ST_OK) return s;
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return st_error(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  }
  char buf[1 << 16];
  *crc = 0;
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) *crc = st_crc32c(*crc, buf, n);
  bool ok = !ferror(f);
  fclose(f);
  return ok ? ST_OK : st_error(ST_ERR_IO, "%s: cannot read", path);
}

static json_t *logs_json(const st_train_position *p) {
  json_t *a = json_array();
  for (int i = 0; i < p->nlogs; i++) {
    const st_epoch_logs *l = &p->logs[i];
    json_array_append_new(a, json_pack("{s:i, s:f, s:f, s:b, s:f, s:f, s:f, s:f, s:I}", "epoch",
                                       l->epoch, "loss", l->loss, "accuracy", l->accuracy,
                                       "has_validation", l->has_validation, "val_loss",
                                       l->val_loss, "val_accuracy", l->val_accuracy, "lr", l->lr,
                                       "seconds", l->seconds, "steps", (json_int_t)l->steps));
  }
  return a;
}

/* A cosine schedule's warmup (issue 31) into the schedule object o: only
 * when set, so files of runs without one keep their bytes. */
static json_t *with_warmup(json_t *o, const st_schedule *lr) {
  if (o && lr->warmup_steps) {
    json_object_set_new(o, "warmup_steps", json_integer((json_int_t)lr->warmup_steps));
    json_object_set_new(o, "warmup_target", json_real((double)lr->warmup_target));
  }
  return o;
}

static json_t *schedule_json(const st_schedule *lr) {
  return with_warmup(json_pack("{s:i, s:f, s:I, s:f, s:b, s:f}", "kind", (int)lr->kind, "initial",
                               (double)lr->initial, "decay_steps", (json_int_t)lr->decay_steps,
                               "decay_rate", (double)lr->decay_rate, "staircase", lr->staircase,
                               "alpha", (double)lr->alpha),
                     lr);
}

/* state.json's "identity": the run that wrote a backup (checked on resume). */
static json_t *identity_json(const st_model *m, const st__run_identity *id) {
  json_t *o = json_pack("{s:I, s:s, s:o, s:I}", "model_structure_crc32c",
                        (json_int_t)st__net_structure_crc(&m->net), "optimizer",
                        st_optimizer_name(m->compile.optimizer.kind), "learning_rate",
                        schedule_json(&m->compile.optimizer.lr), "seed",
                        (json_int_t)m->net.seed);
  if (o && id->global_batch > 0)
    json_object_set_new(o, "batch_size", json_integer((json_int_t)id->global_batch));
  if (o && id->data) json_object_set_new(o, "data", json_string(id->data));
  return o;
}

static json_t *state_json(const st_model *m, const st_train_position *p,
                          const st__run_identity *id) {
  const st_schedule *lr = &m->net.optimizer.lr;
  json_t *o = json_pack(
      "{s:s, s:i, s:s, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:I, s:s, s:{s:i, s:f, s:I, s:f, s:b, "
      "s:f}, s:o}",
      "format", CKPT_FORMAT, "version", CKPT_VERSION, "model", m->name, "seed",
      (json_int_t)m->net.seed, "step", (json_int_t)m->net.step, "epoch", (json_int_t)p->epoch,
      "step_in_epoch", (json_int_t)p->step_in_epoch, "loss_sum", p->loss_sum, "examples",
      (json_int_t)p->examples, "correct", (json_int_t)p->correct, "metric_count",
      (json_int_t)p->metric_count, "optimizer", st_optimizer_name(m->net.optimizer.kind),
      "lr_schedule", "kind", (int)lr->kind, "initial", (double)lr->initial, "decay_steps",
      (json_int_t)lr->decay_steps, "decay_rate", (double)lr->decay_rate, "staircase",
      lr->staircase, "alpha", (double)lr->alpha, "history", logs_json(p));
  if (o) with_warmup(json_object_get(o, "lr_schedule"), lr);
  if (o && id) json_object_set_new(o, "identity", identity_json(m, id));
  return o;
}

uint32_t st__ckpt_state_crc(json_t *o) {
  json_t *copy = json_deep_copy(o);
  json_object_del(copy, "state_crc32c");
  char *text = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
  uint32_t crc = text ? st_crc32c(0, text, strlen(text)) : 0;
  free(text);
  json_decref(copy);
  return crc;
}

char *st__ckpt_state_text(json_t *o) {
  return json_dumps(o, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
}

static st_status write_json(const char *path, json_t *o) {
  char *text = st__ckpt_state_text(o);
  if (!text) return st_error(ST_ERR_NOMEM, "%s: out of memory", path);
  st__atomic_file a;
  st_status s = st__atomic_open(&a, path);
  if (s == ST_OK) {
    size_t len = strlen(text);
    s = st__atomic_commit(&a, fwrite(text, 1, len, a.f) == len ? 0 : errno);
  }
  free(text);
  return s;
}

/* Test hook: keep only the first `budget` bytes of the files, in write
 * order, as a crash in the middle of the save would. */
static st_status simulate_crash(const char *tmp, int64_t budget) {
  const char *files[] = {"weights.safetensors", "optimizer.safetensors", "state.json"};
  for (int i = 0; i < 3; i++) {
    char p[4200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", tmp, files[i]);
    if (stat(p, &sb) != 0) continue;
    int64_t keep = budget < sb.st_size ? (budget > 0 ? budget : 0) : sb.st_size;
    if (keep < sb.st_size && truncate(p, keep) != 0) break;
    budget -= sb.st_size;
  }
  return st_error(ST_ERR_IO, "%s: test hook: the write stopped part way", tmp);
}

/* ---- the tensor files ---- */

/* The tensors of one file: the variables (slot -1 each) or the slots, with
 * where each comes from and its CRC32C once fetched. */
typedef struct streamed {
  st_model *m;
  int n;
  st_named_tensor *ts;
  int *layer, *param, *slot;
  uint32_t *crc;
  float *buf; /* room for the largest variable */
} streamed;

static void streamed_free(streamed *x) {
  free(x->ts), free(x->layer), free(x->param), free(x->slot), free(x->crc), free(x->buf);
}

static st_status streamed_make(st_model *m, bool slots, streamed *x) {
  const st_net *n = &m->net;
  int cap = st__model_var_count(m) * (slots ? (n->n_slots ? n->n_slots : 1) : 1) + 1, k = 0;
  size_t big = 1;
  memset(x, 0, sizeof *x);
  x->m = m;
  x->ts = calloc((size_t)cap, sizeof *x->ts);
  x->layer = malloc(sizeof(int) * (size_t)cap), x->param = malloc(sizeof(int) * (size_t)cap);
  x->slot = malloc(sizeof(int) * (size_t)cap), x->crc = calloc((size_t)cap, sizeof(uint32_t));
  if (!x->ts || !x->layer || !x->param || !x->slot || !x->crc)
    return st_error(ST_ERR_NOMEM, "checkpoint: out of memory");
  for (int j = slots ? 0 : -1; j < (slots ? n->n_slots : 0); j++) /* file order: slot-major */
    for (int i = 0; i < n->nlayers; i++)
      for (int p = 0; p < n->layers[i]->nparams; p++) {
        const st_layer *l = n->layers[i];
        if (j >= 0 && !l->params[p].trainable) continue;
        st__describe_var(l, p, &x->ts[k]);
        if (j >= 0) {
          size_t len = strlen(x->ts[k].name);
          snprintf(x->ts[k].name + len, sizeof x->ts[k].name - len, "/%s", slot_name(m, j));
        }
        x->layer[k] = i, x->param[k] = p, x->slot[k++] = j;
        if (st_shape_size(l->params[p].shape) > big) big = st_shape_size(l->params[p].shape);
      }
  x->n = k;
  if (!(x->buf = malloc(big * sizeof(float)))) return st_error(ST_ERR_NOMEM, "checkpoint: out of memory");
  return ST_OK;
}

static st_status streamed_fetch(void *arg, int k, const float **data) {
  streamed *x = arg;
  st_status s = st__vars_read(x->m->strategy, &x->m->net, x->layer[k], x->param[k], x->slot[k],
                              x->buf, data);
  if (s == ST_OK)
    x->crc[k] = st_crc32c(0, *data, st_shape_size(x->m->net.layers[x->layer[k]]->params[x->param[k]].shape) * sizeof(float));
  return s;
}

static json_t *streamed_crcs(const streamed *x) {
  json_t *o = json_object();
  for (int i = 0; i < x->n; i++) json_object_set_new(o, x->ts[i].name, json_integer(x->crc[i]));
  return o;
}

/* The two tensor files, each tensor read through the variable placement
 * (distribute/placement.h) as the file is written: from the net's buffers,
 * or (a pipeline across processes) received from its stage. */
static st_status write_files(st_model *m, const char *tmp, json_t *state) {
  streamed w, o;
  char p[4200];
  uint32_t wcrc = 0, ocrc = 0;
  st_status s = streamed_make(m, false, &w);
  if (s == ST_OK) s = streamed_make(m, true, &o);
  if (s == ST_OK) {
    snprintf(p, sizeof p, "%s/weights.safetensors", tmp);
    s = st__safetensors_write_fetch(p, w.ts, w.n, NULL, NULL, 0, streamed_fetch, &w);
  }
  if (s == ST_OK) s = st__ckpt_file_crc(p, &wcrc);
  if (s == ST_OK) {
    snprintf(p, sizeof p, "%s/optimizer.safetensors", tmp);
    s = st__safetensors_write_fetch(p, o.ts, o.n, NULL, NULL, 0, streamed_fetch, &o);
  }
  if (s == ST_OK) s = st__ckpt_file_crc(p, &ocrc);
  if (s == ST_OK) {
    json_object_set_new(state, "tensors", json_pack("{s:o, s:o}", "weights", streamed_crcs(&w),
                                                    "optimizer", streamed_crcs(&o)));
    json_object_set_new(state, "files", json_pack("{s:I, s:I}", "weights.safetensors",
                                                  (json_int_t)wcrc, "optimizer.safetensors",
                                                  (json_int_t)ocrc));
    json_object_set_new(state, "state_crc32c", json_integer(st__ckpt_state_crc(state)));
    snprintf(p, sizeof p, "%s/state.json", tmp);
    s = write_json(p, state);
  }
  streamed_free(&w);
  streamed_free(&o);
  return s;
}

/* Create the temp directory "<dir>/.tmp-<name>-<16 random hex>" (mkdir is
 * exclusive, so a name planted in advance is never used; up to 16 tried). */
static st_status make_temp_dir(const char *dir, const char *name, char *tmpname, size_t tn,
                               char *tmp, size_t n) {
  for (int i = 0; i < 16; i++) {
    snprintf(tmpname, tn, ".tmp-%s-%016llx", name, (unsigned long long)st__random_u64());
    if ((size_t)snprintf(tmp, n, "%s/%s", dir, tmpname) >= n)
      return st_error(ST_ERR_INVALID, "%s: path too long", dir);
    if (mkdir(tmp, 0777) == 0) return ST_OK;
    if (errno != EEXIST) break;
  }
  return st_error(ST_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
}

st_status st_checkpoint_save(st_model *m, const char *dir, const st_checkpoint_options *o) {
  st_status s = st__model_check(m, "st_checkpoint_save", true);
  if (s != ST_OK) return s;
  if (!dir || !dir[0])
    return st_error(ST_ERR_INVALID, "st_checkpoint_save: dir is %s", dir ? "empty" : "NULL");
  if (!o) return st_error(ST_ERR_INVALID, "st_checkpoint_save: o is NULL");
  if ((s = st__strategy_reentry(m->strategy, "st_checkpoint_save", true)) != ST_OK) return s;
  return st__checkpoint_save_at(m, dir, o, st__model_position(m), NULL);
}

static st_status save_as_chief(st_model *m, const char *dir, const st_checkpoint_options *o,
                               const st_train_position *pos, const st__run_identity *id);

st_status st__checkpoint_save_at(st_model *m, const char *dir, const st_checkpoint_options *o,
                                 const st_train_position *pos, const st__run_identity *id) {
  if (!m->compiled) return st_error(ST_ERR_INVALID, "checkpoint: model is not compiled");
  bool served = false;
  /* sharded slots: every worker takes part; then a pipeline stage streams
   * its tensors to the chief */
  st_status s = st__vars_gather_slots(m->strategy, &m->net);
  if (s == ST_OK) s = st__vars_serve(m->strategy, &m->net, true, &served);
  if (s != ST_OK || served) return s;
  if (!st__strategy_is_chief(m->strategy)) return ST_OK; /* multi-worker: the chief writes */
  st__vars_begin(m->strategy, &m->net, true);
  s = save_as_chief(m, dir, o, pos, id);
  st__vars_end(m->strategy, &m->net, s); /* a failure stops the stages at once */
  return s;
}

/* The chief's part of st__checkpoint_save_at: the directory and its files. */
static st_status save_as_chief(st_model *m, const char *dir, const st_checkpoint_options *o,
                               const st_train_position *pos, const st__run_identity *id) {
  st_status s = st__mkdir_p(dir);
  if (s != ST_OK) return s;
  long seq = st__ckpt_next_seq(dir);
  char name[32], tmpname[64], tmp[4096], dst[4096];
  snprintf(name, sizeof name, "ckpt-%06ld", seq);
  snprintf(dst, sizeof dst, "%s/%s", dir, name);
  if ((s = make_temp_dir(dir, name, tmpname, sizeof tmpname, tmp, sizeof tmp)) != ST_OK) return s;
  json_t *state = state_json(m, pos, id);
  s = state ? write_files(m, tmp, state) : st_error(ST_ERR_NOMEM, "checkpoint: out of memory");
  json_decref(state);
  if (s == ST_OK && o->test_fail_after_bytes > 0) return simulate_crash(tmp, o->test_fail_after_bytes);
  if (s == ST_OK) s = st__fsync_path(tmp);
  if (s == ST_OK && rename(tmp, dst) != 0)
    s = st_error(ST_ERR_IO, "%s: cannot rename to %s: %s", tmp, dst, strerror(errno));
  if (s != ST_OK) {
    st__ckpt_remove(dir, tmpname);
    return s;
  }
  if ((s = st__fsync_path(dir)) != ST_OK || (s = st__ckpt_write_latest(dir, name)) != ST_OK)
    return s;
  st__ckpt_prune(dir, o->keep, seq);
  return ST_OK;
}
