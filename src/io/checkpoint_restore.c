/* Restoring a checkpoint: state.json is checked against its own CRC32C, each
 * safetensors file against the CRC32C of its bytes (on a mismatch the damaged
 * tensor is named when the file still parses), every variable and slot
 * against the model's names and shapes and its own CRC32C, and (a backup
 * resumed by fit) the identity of the run that wrote it against this run's —
 * all before the model changes. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "io/checkpoint.h"
#include "io/checkpoint_io.h"

/* state.json grows with the epoch history (~200 bytes an epoch). */
#define STATE_MAX_BYTES ((size_t)256 << 20)

typedef struct loaded {
  char dir[4096];
  json_t *state;
  st_safetensors w, o;
  bool local; /* a pipeline stage across processes: headers only (see apply_local) */
} loaded;

static st_status state_int(const loaded *L, const char *key, int64_t lo, int64_t *out) {
  json_t *v = json_object_get(L->state, key);
  if (!json_is_integer(v) || json_integer_value(v) < lo)
    return st_error(ST_ERR_FORMAT, "%s/state.json: field '%s' missing or out of range", L->dir, key);
  *out = json_integer_value(v);
  return ST_OK;
}

static st_status load_state(loaded *L) {
  char p[4200];
  snprintf(p, sizeof p, "%s/state.json", L->dir);
  char *raw = NULL;
  size_t len = 0;
  st_status s = st__read_all(p, STATE_MAX_BYTES, &raw, &len);
  if (s != ST_OK) return s;
  json_error_t err;
  L->state = json_loadb(raw, len, JSON_REJECT_DUPLICATES, &err);
  if (!L->state) {
    free(raw);
    return st_error(ST_ERR_FORMAT, "%s: line %d: %s", p, err.line, err.text);
  }
  char *canon = st__ckpt_state_text(L->state);
  bool same = canon && strlen(canon) == len && memcmp(canon, raw, len) == 0;
  free(canon), free(raw);
  int64_t crc;
  s = state_int(L, "state_crc32c", 0, &crc);
  if (s == ST_OK && (!same || (uint32_t)crc != st__ckpt_state_crc(L->state)))
    return st_error(ST_ERR_FORMAT, "%s: checksum mismatch: the state is damaged", p);
  json_t *fmt = json_object_get(L->state, "format");
  int64_t ver;
  if (s == ST_OK && (!json_is_string(fmt) || strcmp(json_string_value(fmt), "strata-checkpoint")))
    return st_error(ST_ERR_FORMAT, "%s: not a Strata checkpoint (field 'format')", p);
  if (s == ST_OK && (s = state_int(L, "version", 1, &ver)) == ST_OK && ver != 1)
    return st_error(ST_ERR_FORMAT, "%s: version %lld not supported (1)", p, (long long)ver);
  return s;
}

/* Tensor t's CRC32C against state.json's for it in group. */
static bool tensor_crc_ok(const loaded *L, const char *group, const char *name, uint32_t crc) {
  json_t *c = json_object_get(json_object_get(json_object_get(L->state, "tensors"), group), name);
  return json_is_integer(c) && (uint32_t)json_integer_value(c) == crc;
}

static size_t tensor_floats(const st_named_tensor *t) {
  size_t cnt = 1;
  for (int d = 0; d < t->rank; d++) cnt *= (size_t)t->dims[d];
  return cnt;
}

/* The file read (L->local: its header), its CRC and (L->local) each
 * tensor's; *unparsed: the file's bytes were read (crc is theirs) but do not
 * parse. */
static st_status read_file(loaded *L, const char *p, st_safetensors *out, uint32_t *crc,
                           uint32_t **tcrc, bool *unparsed) {
  *unparsed = false;
  if (!L->local) {
    st_status s = st__ckpt_file_crc(p, crc);
    if (s == ST_OK && (s = st__safetensors_read(p, out)) != ST_OK) *unparsed = true;
    return s;
  }
  st_status s = st__safetensors_read_header(p, out);
  if (s != ST_OK) { /* the file's CRC decides the message, as above */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st_last_error());
    if (st__ckpt_file_crc(p, crc) != ST_OK) return ST_ERR_IO;
    *unparsed = true;
    return st_error(s, "%s", msg);
  }
  *tcrc = calloc((size_t)out->n + 1, sizeof **tcrc);
  if (!*tcrc) return st_error(ST_ERR_NOMEM, "checkpoint: out of memory");
  return st__safetensors_checksums(p, out, crc, *tcrc);
}

/* CRC of a file's bytes against state.json; on a mismatch name the tensor.
 * L->local: the tensors' CRCs from one streamed pass (every process checks
 * every byte, so all stages agree on a damaged file and name the same
 * tensor); only the header is kept. */
static st_status check_file(loaded *L, const char *file, const char *group, st_safetensors *out) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", L->dir, file);
  uint32_t crc = 0, *tcrc = NULL;
  bool unparsed;
  st_status s = read_file(L, p, out, &crc, &tcrc, &unparsed);
  json_t *want = json_object_get(json_object_get(L->state, "files"), file);
  bool file_ok = json_is_integer(want) && (uint32_t)json_integer_value(want) == crc;
  if (s != ST_OK) {
    free(tcrc);
    if (!unparsed || file_ok) return s;
    return st_error(ST_ERR_FORMAT, "%s: checksum mismatch: %s", p, st_last_error());
  }
  for (int i = 0; s == ST_OK && i < out->n; i++) {
    const st_named_tensor *t = &out->tensors[i];
    uint32_t c = tcrc ? tcrc[i] : st_crc32c(0, t->data, tensor_floats(t) * 4);
    if (!tensor_crc_ok(L, group, t->name, c))
      s = st_error(ST_ERR_FORMAT, "%s: tensor '%s': checksum mismatch (data damaged)", p, t->name);
  }
  free(tcrc);
  if (s == ST_OK && !file_ok)
    return st_error(ST_ERR_FORMAT, "%s: checksum mismatch in the file's header", p);
  return s;
}

/* Every variable and slot of the model is in the files with its shape. */
static st_status check_model(const loaded *L, const st_model *m) {
  char wp[4200], op[4200];
  snprintf(wp, sizeof wp, "%s/weights.safetensors", L->dir);
  snprintf(op, sizeof op, "%s/optimizer.safetensors", L->dir);
  if (L->w.n != st__model_var_count(m))
    return st_error(ST_ERR_FORMAT, "%s: %d tensors, the model has %d variables", wp, L->w.n,
                    st__model_var_count(m));
  json_t *opt = json_object_get(L->state, "optimizer");
  if (!json_is_string(opt) || strcmp(json_string_value(opt), st_optimizer_name(m->net.optimizer.kind)))
    return st_error(ST_ERR_FORMAT, "%s/state.json: optimizer '%s', the model uses '%s'", L->dir,
                    json_is_string(opt) ? json_string_value(opt) : "?",
                    st_optimizer_name(m->net.optimizer.kind));
  int nslot = 0;
  for (int i = 0; i < m->net.nlayers; i++)
    for (int p = 0; p < m->net.layers[i]->nparams; p++) {
      st_named_tensor want;
      st__describe_var(m->net.layers[i], p, &want);
      st_status s = st__check_tensor(wp, &want, st__safetensors_find(&L->w, want.name));
      if (s != ST_OK) return s;
      nslot += m->net.layers[i]->params[p].trainable * m->net.n_slots;
    }
  if (L->o.n != nslot)
    return st_error(ST_ERR_FORMAT, "%s: %d slot tensors, the optimizer needs %d", op, L->o.n, nslot);
  /* apply_vars takes slots by position (slot-major, variables in model
   * order): each must be "<variable>/<slot>" with the variable's shape, or a
   * forged file would make it copy past a smaller tensor's data. */
  int per = m->net.n_slots ? nslot / m->net.n_slots : 0, t = 0;
  for (int i = 0; i < m->net.nlayers; i++)
    for (int p = 0; p < m->net.layers[i]->nparams; p++) {
      if (!m->net.layers[i]->params[p].trainable) continue;
      st_named_tensor want;
      st__describe_var(m->net.layers[i], p, &want);
      size_t len = strlen(want.name);
      for (int k = 0; k < m->net.n_slots; k++) {
        const st_named_tensor *got = &L->o.tensors[(size_t)k * (size_t)per + (size_t)t];
        if (strncmp(got->name, want.name, len) != 0 || got->name[len] != '/')
          return st_error(ST_ERR_FORMAT, "%s: slot tensor %d is '%s', expected a slot of '%s'", op,
                          k * per + t, got->name, want.name);
        st_named_tensor slot = want; /* so an error names the slot tensor */
        snprintf(slot.name, sizeof slot.name, "%s", got->name);
        st_status s = st__check_tensor(op, &slot, got);
        if (s != ST_OK) return s;
      }
      t++;
    }
  return ST_OK;
}

/* Sharded optimizer state keeps no model slots between checkpoints
 * (distribute/shard.h): make them for apply_vars; the strategy takes its
 * shards from them in the placement's publish (distribute/placement.h). */
static st_status stage_slots(st_model *m) {
  st_net *n = &m->net;
  for (int k = 0; k < n->n_slots; k++)
    if (!n->slots[k]) {
      n->slots[k] = n->be->alloc(n->be_ctx, (n->n_params ? n->n_params : 1) * sizeof(float));
      if (!n->slots[k]) return st_error(ST_ERR_NOMEM, "checkpoint: out of memory for the slots");
    }
  return ST_OK;
}

/* L->local: this stage's variables and slots read from the files straight
 * into its share of the model (nothing else becomes memory), each checked
 * against its CRC again (the file could have changed since check_file). An
 * I/O error here leaves the share partly restored. */
static st_status read_local(const loaded *L, const char *file, const char *group,
                            const st_safetensors *f, int i, float *dst) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", L->dir, file);
  const st_named_tensor *t = &f->tensors[i];
  st_status s = st__safetensors_read_tensor(p, f, i, dst);
  if (s == ST_OK && !tensor_crc_ok(L, group, t->name, st_crc32c(0, dst, tensor_floats(t) * 4)))
    s = st_error(ST_ERR_FORMAT, "%s: tensor '%s': checksum mismatch (the file changed while "
                 "it was read)", p, t->name);
  return s;
}

static st_status apply_local(const loaded *L, st_model *m) {
  st_net *n = &m->net;
  int t = 0, per = L->o.n / (n->n_slots ? n->n_slots : 1);
  st_status s = ST_OK;
  for (int i = 0; s == ST_OK && i < n->nlayers; i++)
    for (int p = 0; s == ST_OK && p < n->layers[i]->nparams; p++) {
      const st_layer *l = n->layers[i];
      bool mine = st__var_is_local(n, l, p);
      st_named_tensor want;
      st__describe_var(l, p, &want);
      int w = (int)(st__safetensors_find(&L->w, want.name) - L->w.tensors);
      if (mine) s = read_local(L, "weights.safetensors", "weights", &L->w, w,
                               st__var_ptr(l, p, n->params, n->state));
      if (!l->params[p].trainable) continue;
      bool slots = st__slots_are_local(n, l, p);
      for (int k = 0; slots && s == ST_OK && k < n->n_slots; k++)
        s = read_local(L, "optimizer.safetensors", "optimizer", &L->o, k * per + t,
                       n->slots[k] + l->params[p].offset);
      t++;
    }
  return s;
}

static void apply_vars(const loaded *L, st_model *m) {
  int t = 0;
  for (int i = 0; i < m->net.nlayers; i++)
    for (int p = 0; p < m->net.layers[i]->nparams; p++) {
      const st_layer *l = m->net.layers[i];
      st_named_tensor want;
      st__describe_var(l, p, &want);
      size_t bytes = st_shape_size(l->params[p].shape) * sizeof(float);
      st__be_to_device(m->net.be_ctx, st__var_ptr(l, p, m->net.params, m->net.state),
                       st__safetensors_find(&L->w, want.name)->data, bytes);
      if (!l->params[p].trainable) continue;
      for (int k = 0; k < m->net.n_slots; k++) /* slots in file order: slot-major */
        st__be_to_device(m->net.be_ctx, m->net.slots[k] + l->params[p].offset,
                         L->o.tensors[(size_t)k * (size_t)(L->o.n / (m->net.n_slots ? m->net.n_slots : 1)) + t].data,
                         bytes);
      t++;
    }
}

typedef struct position {
  st_train_position p;
  int64_t step;
  st_schedule lr;
} position;

static st_status read_history(const loaded *L, position *out) {
  json_t *h = json_object_get(L->state, "history");
  size_t n = json_array_size(h);
  st_epoch_logs *logs = calloc(n + 1, sizeof *logs);
  if (!logs) return st_error(ST_ERR_NOMEM, "checkpoint: out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(h, i);
    int hv = 0;
    json_int_t steps = 0;
    if (json_unpack(e, "{s:i, s:F, s:F, s:b, s:F, s:F, s:F, s:F, s:I}", "epoch", &logs[i].epoch,
                    "loss", &logs[i].loss, "accuracy", &logs[i].accuracy, "has_validation", &hv,
                    "val_loss", &logs[i].val_loss, "val_accuracy", &logs[i].val_accuracy, "lr",
                    &logs[i].lr, "seconds", &logs[i].seconds, "steps", &steps) != 0) {
      free(logs);
      return st_error(ST_ERR_FORMAT, "%s/state.json: history entry %zu is malformed", L->dir, i);
    }
    logs[i].has_validation = hv;
    logs[i].steps = steps;
  }
  out->p.logs = logs;
  out->p.nlogs = (int)n;
  return ST_OK;
}

/* A learning rate schedule object of state.json; false when malformed. */
static bool schedule_from_json(json_t *ls, st_schedule *out) {
  double initial = 0, rate = 0, alpha = 0;
  int kind = 0, stair = 0;
  json_int_t dsteps = 0;
  if (json_unpack(ls, "{s:i, s:F, s:I, s:F, s:b, s:F}", "kind", &kind, "initial", &initial,
                  "decay_steps", &dsteps, "decay_rate", &rate, "staircase", &stair, "alpha",
                  &alpha) != 0 ||
      kind < 0 || kind >= ST_SCHEDULE_COUNT || !(initial > 0))
    return false;
  *out = (st_schedule){(st_schedule_kind)kind, (float)initial, dsteps, (float)rate, stair,
                       (float)alpha, 0, 0.0f};
  json_t *ws = json_object_get(ls, "warmup_steps"), *wt = json_object_get(ls, "warmup_target");
  if (ws || wt) { /* a cosine schedule's warmup (written only when set) */
    if (!json_is_integer(ws) || !json_is_number(wt) || json_integer_value(ws) < 0) return false;
    out->warmup_steps = (int64_t)json_integer_value(ws);
    out->warmup_target = (float)json_number_value(wt);
  }
  return true;
}

/* Everything state.json says about where training stands, validated. */
static st_status read_position(const loaded *L, position *out) {
  memset(out, 0, sizeof *out);
  json_t *ls = json_object_get(L->state, "lr_schedule"), *loss = json_object_get(L->state, "loss_sum");
  st_status s = state_int(L, "step", 0, &out->step);
  if (s == ST_OK) s = state_int(L, "epoch", 0, &out->p.epoch);
  if (s == ST_OK) s = state_int(L, "step_in_epoch", 0, &out->p.step_in_epoch);
  if (s == ST_OK) s = state_int(L, "examples", 0, &out->p.examples);
  if (s == ST_OK) s = state_int(L, "correct", 0, &out->p.correct);
  if (s == ST_OK) s = state_int(L, "metric_count", 0, &out->p.metric_count);
  if (s == ST_OK && (!json_is_number(loss) || !schedule_from_json(ls, &out->lr)))
    s = st_error(ST_ERR_FORMAT, "%s/state.json: loss_sum or lr_schedule malformed", L->dir);
  if (s != ST_OK) return s;
  out->p.loss_sum = json_number_value(loss);
  return read_history(L, out);
}

/* ---- the identity of the run that wrote a backup ------------------------
 * state.json's "identity" (absent from files written before it existed, or
 * by st_checkpoint_save): each field present is compared with this run's as
 * text (both sides formatted alike), in this order. */
enum { ID_STRUCTURE, ID_OPTIMIZER, ID_LR, ID_SEED, ID_BATCH, ID_DATA, ID_COUNT };
static const char *const g_id_names[ID_COUNT] = {
    "model structure (layers, shapes; CRC32C)", "optimizer", "learning rate", "seed",
    "batch size", "data"};

typedef struct id_field {
  char was[512], now[512]; /* for the message (a long data fingerprint is cut) */
  bool differs;
} id_field;

static void schedule_text(const st_schedule *s, int digits, char *buf, size_t n) {
  static const char *const kinds[] = {"constant", "exponential decay", "cosine decay"};
  _Static_assert(sizeof kinds / sizeof *kinds == ST_SCHEDULE_COUNT, "a name per schedule");
  if (s->kind == ST_SCHEDULE_CONSTANT) {
    snprintf(buf, n, "%.*g", digits, (double)s->initial);
    return;
  }
  int at = snprintf(buf, n, "%.*g (%s, decay_steps %lld, decay_rate %.*g, staircase %s, alpha %.*g",
                    digits, (double)s->initial, kinds[s->kind], (long long)s->decay_steps, digits,
                    (double)s->decay_rate, s->staircase ? "on" : "off", digits, (double)s->alpha);
  if (at > 0 && (size_t)at < n && s->warmup_steps)
    at += snprintf(buf + at, n - (size_t)at, ", warmup_steps %lld, warmup_target %.*g",
                   (long long)s->warmup_steps, digits, (double)s->warmup_target);
  if (at > 0 && (size_t)at < n) snprintf(buf + at, n - (size_t)at, ")");
}

/* Both schedules as text: short (%g) unless that hides a difference. */
static void schedule_pair(const st_schedule *was, const st_schedule *now, id_field *f) {
  bool same = memcmp(was, now, sizeof *was) == 0;
  schedule_text(was, 6, f->was, sizeof f->was);
  schedule_text(now, 6, f->now, sizeof f->now);
  if (!same && strcmp(f->was, f->now) == 0) {
    schedule_text(was, 9, f->was, sizeof f->was);
    schedule_text(now, 9, f->now, sizeof f->now);
  }
}

/* Field i as recorded and for this run; false when it is not checked (not
 * recorded, or this run does not say). A recorded value of the wrong type
 * is a damaged file. */
static st_status id_field_text(const loaded *L, int i, const st_model *m,
                               const st__run_identity *id, id_field *f, bool *checked) {
  static const char *const keys[ID_COUNT] = {"model_structure_crc32c", "optimizer", "learning_rate",
                                             "seed", "batch_size", "data"};
  json_t *v = json_object_get(json_object_get(L->state, "identity"), keys[i]);
  *checked = v && !(i == ID_BATCH && id->global_batch <= 0) && !(i == ID_DATA && !id->data);
  if (!*checked) return ST_OK;
  bool ok = i == ID_OPTIMIZER || i == ID_DATA ? json_is_string(v)
            : i == ID_LR                       ? json_is_object(v)
                                               : json_is_integer(v);
  st_schedule lr;
  if (!ok || (i == ID_LR && !schedule_from_json(v, &lr)))
    return st_error(ST_ERR_FORMAT, "%s/state.json: identity field '%s' malformed", L->dir, keys[i]);
  long long n = json_is_integer(v) ? (long long)json_integer_value(v) : 0;
  switch (i) {
    case ID_STRUCTURE:
      snprintf(f->was, sizeof f->was, "0x%08llx", n);
      snprintf(f->now, sizeof f->now, "0x%08x", (unsigned)st__net_structure_crc(&m->net));
      break;
    case ID_OPTIMIZER:
      snprintf(f->was, sizeof f->was, "%s", json_string_value(v));
      snprintf(f->now, sizeof f->now, "%s", st_optimizer_name(m->compile.optimizer.kind));
      break;
    case ID_LR: schedule_pair(&lr, &m->compile.optimizer.lr, f); break;
    case ID_SEED:
      snprintf(f->was, sizeof f->was, "%lld", n);
      snprintf(f->now, sizeof f->now, "%lld", (long long)m->net.seed);
      break;
    case ID_BATCH:
      snprintf(f->was, sizeof f->was, "%lld", n);
      snprintf(f->now, sizeof f->now, "%lld", (long long)id->global_batch);
      break;
    default:
      snprintf(f->was, sizeof f->was, "'%s'", json_string_value(v));
      snprintf(f->now, sizeof f->now, "'%s'", id->data);
  }
  f->differs = i == ID_DATA ? strcmp(json_string_value(v), id->data) != 0
                            : strcmp(f->was, f->now) != 0;
  return ST_OK;
}

/* The recorded identity against this run's: a mismatch is refused (the
 * first field named) unless id->anyway, which warns for each and goes on;
 * *keep_lr: this run's learning rate stays (it differs and anyway). */
static st_status check_identity(const loaded *L, const char *dir, const st_model *m,
                                const st__run_identity *id, bool *keep_lr) {
  *keep_lr = false;
  for (int i = 0; i < ID_COUNT; i++) {
    id_field f;
    bool checked;
    st_status s = id_field_text(L, i, m, id, &f, &checked);
    if (s != ST_OK) return s;
    if (!checked || !f.differs) continue;
    if (!id->anyway)
      return st_error(ST_ERR_INVALID,
                      "%s was written by a run with %s %s, this run has %s "
                      "(--resume-anyway resumes with this run's values)",
                      dir, g_id_names[i], f.was, f.now);
    st_log(ST_LOG_WARN, "%s was written by a run with %s %s; resuming anyway with this run's %s",
           dir, g_id_names[i], f.was, f.now);
    if (i == ID_LR) *keep_lr = true;
  }
  return ST_OK;
}

static st_status resolve(const char *dir, loaded *L) {
  char latest[4096];
  if (st_checkpoint_latest(dir, latest, sizeof latest) == ST_OK) {
    snprintf(L->dir, sizeof L->dir, "%s", latest);
    return ST_OK;
  }
  const char *base = strrchr(dir, '/');
  if (st__ckpt_seq(base ? base + 1 : dir) >= 0) {
    st_clear_error();
    snprintf(L->dir, sizeof L->dir, "%s", dir);
    return ST_OK;
  }
  return ST_ERR_IO; /* st_checkpoint_latest's message stands */
}

st_status st_checkpoint_restore(st_model *m, const char *dir) {
  st_status s = st__model_check(m, "st_checkpoint_restore", true);
  if (s != ST_OK) return s;
  if (!dir || !dir[0])
    return st_error(ST_ERR_INVALID, "st_checkpoint_restore: dir is %s", dir ? "empty" : "NULL");
  if ((s = st__strategy_reentry(m->strategy, "st_checkpoint_restore", true)) != ST_OK) return s;
  return st__checkpoint_restore_at(m, dir, &m->last_pos, NULL);
}

st_status st__checkpoint_restore_at(st_model *m, const char *dir, st_train_position *at,
                                    const st__run_identity *id) {
  if (!m->compiled) return st_error(ST_ERR_INVALID, "checkpoint: model is not compiled");
  loaded L;
  memset(&L, 0, sizeof L);
  L.local = m->net.reserved;
  bool keep_lr = false;
  st_status s = resolve(dir, &L);
  if (s == ST_OK) s = load_state(&L);
  if (s == ST_OK && id) s = check_identity(&L, dir, m, id, &keep_lr);
  if (s == ST_OK) s = check_file(&L, "weights.safetensors", "weights", &L.w);
  if (s == ST_OK) s = check_file(&L, "optimizer.safetensors", "optimizer", &L.o);
  if (s == ST_OK) s = check_model(&L, m);
  position pos = {0};
  if (s == ST_OK) s = read_position(&L, &pos);
  if (s == ST_OK && !L.local) s = stage_slots(m);
  if (s == ST_OK && L.local) s = apply_local(&L, m); /* all checked: now the model changes */
  else if (s == ST_OK) apply_vars(&L, m);
  if (s == ST_OK) {
    st__train_position_clear(at);
    *at = pos.p;
    m->net.step = pos.step;
    if (!keep_lr) m->net.optimizer.lr = pos.lr;
    st__vars_publish(m->strategy, &m->net);
  }
  json_decref(L.state);
  st__safetensors_free(&L.w);
  st__safetensors_free(&L.o);
  return s;
}
