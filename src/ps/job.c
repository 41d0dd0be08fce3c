/* What the parameter-server tasks share (ps/job.h): the job description
 * (encoded as key=value lines for the JOB message) and the placement of
 * variables on the ps tasks. The model built from a job is train/ps_model.c's
 * (it may read a Keras JSON file, src/io). */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ps/job.h"

void st__ps_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t st__ps_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

uint64_t st__ps_random_u64(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0;
    close(fd);
  }
  if (!v) v = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
  return v ? v : 1;
}

char *st__ps_job_encode(const st__ps_job *j) {
  const st_optimizer_options *o = &j->opt;
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  if (!f) return NULL;
  fprintf(f, "job_id=%" PRIu64 "\nmodel=%s\ndata=%s\nseed=%" PRId64 "\nbatch=%" PRId64
          "\ntrain_examples=%" PRId64 "\ntotal_steps=%" PRId64 "\nsteps_per_execution=%" PRId64
          "\nval_split=%a\nheartbeat_interval=%a\ncoordinator_timeout=%a\nmax_staleness=%" PRId64
          "\nps_shards=%" PRId64 "\nps_min_shard_bytes=%" PRId64 "\n",
          j->job_id, j->model, j->data, j->seed, j->batch, j->train_examples, j->total_steps,
          j->steps_per_execution, j->val_split, j->heartbeat_interval, j->coordinator_timeout,
          j->max_staleness, j->ps_shards, j->ps_min_shard_bytes);
  fprintf(f, "opt=%d %d %a %" PRId64 " %a %d %a %a %d %a %a %a %a %a\n", (int)o->kind,
          (int)o->lr.kind, o->lr.initial, o->lr.decay_steps, o->lr.decay_rate, o->lr.staircase,
          o->lr.alpha, o->momentum, o->nesterov, o->beta1, o->beta2, o->epsilon, o->rho,
          o->weight_decay);
  fclose(f);
  return s;
}

static bool decode_opt(const char *v, st_optimizer_options *o) {
  int kind, lk, stair, nest;
  int64_t ds;
  float a[9];
  if (sscanf(v, "%d %d %a %" SCNd64 " %a %d %a %a %d %a %a %a %a %a", &kind, &lk, &a[0], &ds, &a[1],
             &stair, &a[2], &a[3], &nest, &a[4], &a[5], &a[6], &a[7], &a[8]) != 14)
    return false;
  if (kind < 0 || kind >= ST_OPT_COUNT || lk < 0 || lk >= ST_SCHEDULE_COUNT) return false;
  *o = st_optimizer_default_options((st_optimizer_kind)kind);
  o->lr.kind = (st_schedule_kind)lk, o->lr.initial = a[0], o->lr.decay_steps = ds;
  o->lr.decay_rate = a[1], o->lr.staircase = stair != 0, o->lr.alpha = a[2];
  o->momentum = a[3], o->nesterov = nest != 0, o->beta1 = a[4], o->beta2 = a[5];
  o->epsilon = a[6], o->rho = a[7], o->weight_decay = a[8];
  return true;
}

static bool decode_line(const char *k, const char *v, st__ps_job *j) {
  char *end = NULL;
#define I64(name) if (!strcmp(k, #name)) return (j->name = strtoll(v, &end, 10)), *end == '\0' && j->name >= 0
#define F64(name) if (!strcmp(k, #name)) return (j->name = strtod(v, &end)), *end == '\0' && j->name >= 0
  if (!strcmp(k, "job_id")) return (j->job_id = strtoull(v, &end, 10)), *end == '\0' && j->job_id;
  if (!strcmp(k, "model")) return snprintf(j->model, sizeof j->model, "%s", v) < (int)sizeof j->model;
  if (!strcmp(k, "data")) return snprintf(j->data, sizeof j->data, "%s", v) < (int)sizeof j->data;
  I64(seed);
  I64(batch);
  I64(train_examples);
  I64(total_steps);
  I64(steps_per_execution);
  I64(ps_shards);
  I64(ps_min_shard_bytes);
  F64(val_split);
  F64(heartbeat_interval);
  F64(coordinator_timeout);
  if (!strcmp(k, "opt")) return decode_opt(v, &j->opt);
  if (!strcmp(k, "max_staleness"))
    return (j->max_staleness = strtoll(v, &end, 10)), *end == '\0' && j->max_staleness >= -1;
#undef I64
#undef F64
  return false;
}

st_status st__ps_job_decode(const char *text, size_t len, st__ps_job *j) {
  memset(j, 0, sizeof *j);
  char *copy = malloc(len + 1);
  if (!copy) return st_error(ST_ERR_NOMEM, "out of memory");
  memcpy(copy, text, len);
  copy[len] = '\0';
  st_status s = ST_OK;
  int line = 0;
  for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    line++;
    char *eq = strchr(l, '=');
    if (!eq) {
      s = st_error(ST_ERR_FORMAT, "JOB: line %d: not key=value", line);
      break;
    }
    *eq = '\0';
    if (!decode_line(l, eq + 1, j)) {
      s = st_error(ST_ERR_FORMAT, "JOB: line %d: bad %.40s", line, l);
      break;
    }
  }
  free(copy);
  if (s == ST_OK && (!j->job_id || !j->model[0]))
    s = st_error(ST_ERR_FORMAT, "JOB: incomplete job description");
  if (s == ST_OK && (s = st__ps_job_check(j, "JOB")) != ST_OK) s = ST_ERR_FORMAT;
  return s;
}

/* The bounds of the command line's options (tools/cmd_train.c): every size
 * a server allocates from is below them, whoever sent the JOB. */
#define INT_IN(f, lo, hi) if (j->f < (lo) || j->f > (hi)) \
    return st_error(ST_ERR_INVALID, "%s: " #f " %lld out of range [%lld, %lld]", what, \
                    (long long)j->f, (long long)(lo), (long long)(hi))
#define REAL_IN(f, lo, hi) if (!(j->f >= (lo) && j->f <= (hi))) \
    return st_error(ST_ERR_INVALID, "%s: " #f " %g out of range [%g, %g]", what, j->f, \
                    (double)(lo), (double)(hi))
st_status st__ps_job_check(const st__ps_job *j, const char *what) {
  INT_IN(batch, 1, ST_PS_MAX_BATCH);
  INT_IN(train_examples, 0, 1LL << 40);
  INT_IN(total_steps, 1, ST_PS_MAX_STEPS);
  INT_IN(steps_per_execution, 1, 100000);
  INT_IN(seed, 0, INT64_MAX);
  INT_IN(max_staleness, -1, 1LL << 40);
  INT_IN(ps_shards, 0, 1 << 20);
  INT_IN(ps_min_shard_bytes, 0, 1LL << 40);
  REAL_IN(val_split, 0.0, 0.99);
  REAL_IN(heartbeat_interval, 0.01, 3600.0);
  REAL_IN(coordinator_timeout, 0.1, 1e6);
  if (j->coordinator_timeout < 2 * j->heartbeat_interval)
    return st_error(ST_ERR_INVALID, "%s: coordinator_timeout %g s is shorter than 2 x "
                    "heartbeat_interval (%g s): the chief reaches the servers once per heartbeat "
                    "interval, so they would take the live chief for lost", what,
                    j->coordinator_timeout, j->heartbeat_interval);
  return ST_OK;
}
#undef INT_IN
#undef REAL_IN

/* Shards of a variable of d0 rows and `bytes` bytes. */
static int64_t shard_count(const st__ps_job *j, int nps, int64_t d0, int64_t bytes) {
  int64_t k = 1;
  if (j && j->ps_shards > 0) k = j->ps_shards;
  if (j && j->ps_min_shard_bytes > 0) {
    k = bytes / j->ps_min_shard_bytes;
    if (k > nps) k = nps;
  }
  if (k > d0) k = d0;
  return k < 1 ? 1 : k;
}

st_status st__ps_layout_make(const st_net *net, int nps, const st__ps_job *j, st__ps_layout *out) {
  memset(out, 0, sizeof *out);
  int64_t n = 0;
  for (int i = 0; i < net->nlayers; i++)
    for (int p = 0; p < net->layers[i]->nparams; p++) {
      const st_param_spec *ps = &net->layers[i]->params[p];
      int64_t d0 = ps->shape.rank ? ps->shape.dims[0] : 1;
      if (ps->trainable) n += shard_count(j, nps, d0, (int64_t)(st_shape_size(ps->shape) * sizeof(float)));
    }
  out->vars = calloc((size_t)(n ? n : 1), sizeof *out->vars);
  out->ps_floats = calloc((size_t)nps, sizeof *out->ps_floats);
  if (!out->vars || !out->ps_floats) {
    st__ps_layout_free(out);
    return st_error(ST_ERR_NOMEM, "out of memory");
  }
  out->nps = nps;
  out->n_state = net->n_state;
  for (int i = 0; i < net->nlayers; i++)
    for (int p = 0; p < net->layers[i]->nparams; p++) {
      const st_param_spec *ps = &net->layers[i]->params[p];
      if (!ps->trainable) continue;
      size_t size = st_shape_size(ps->shape);
      int64_t d0 = ps->shape.rank ? ps->shape.dims[0] : 1;
      int64_t k = shard_count(j, nps, d0, (int64_t)(size * sizeof(float)));
      size_t row = size / (size_t)d0;
      for (int64_t s = 0; s < k; s++) { /* rows [d0*s/k, d0*(s+1)/k) */
        int64_t r0 = d0 * s / k, r1 = d0 * (s + 1) / k;
        st__ps_var *v = &out->vars[out->nvars];
        v->offset = ps->offset + (size_t)r0 * row;
        v->size = (size_t)(r1 - r0) * row;
        v->ps = out->nvars % nps;
        out->ps_floats[v->ps] += v->size;
        out->nvars++;
      }
    }
  return ST_OK;
}

void st__ps_layout_free(st__ps_layout *l) {
  free(l->vars);
  free(l->ps_floats);
  memset(l, 0, sizeof *l);
}

void st__ps_pack(const st__ps_layout *l, int ps, const float *params, float *packed) {
  for (int i = 0; i < l->nvars; i++)
    if (l->vars[i].ps == ps) {
      memcpy(packed, params + l->vars[i].offset, l->vars[i].size * sizeof(float));
      packed += l->vars[i].size;
    }
}

void st__ps_unpack(const st__ps_layout *l, int ps, const float *packed, float *params) {
  for (int i = 0; i < l->nvars; i++)
    if (l->vars[i].ps == ps) {
      memcpy(params + l->vars[i].offset, packed, l->vars[i].size * sizeof(float));
      packed += l->vars[i].size;
    }
}

st_ps_header st__ps_make_header(const st_ps_cluster *c, uint64_t job_id, uint32_t incarnation, int type) {
  st_ps_header h;
  memset(&h, 0, sizeof h);
  h.type = (uint16_t)type;
  h.job_id = job_id;
  h.sender_role = (uint16_t)c->self_role;
  h.sender_index = (uint16_t)c->self_index;
  h.incarnation = incarnation;
  return h;
}

int64_t st__ps_drops_text(st_ps_counters c, char *buf, size_t n) {
  int64_t total = 0;
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 1; i < ST_PS_DROP_COUNT; i++) {
    if (!c.dropped[i]) continue;
    total += c.dropped[i];
    int w = snprintf(buf + at, n - at, "%s%s %lld", at ? ", " : "", st__ps_drop_name((st_ps_drop)i),
                     (long long)c.dropped[i]);
    if (w > 0 && (size_t)w < n - at) at += (size_t)w;
  }
  return total;
}
