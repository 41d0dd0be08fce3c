/* MultiWorkerMirroredStrategy: the mirrored engine (mirrored.c) in every
 * process of an MPI job, its collectives spanning the processes (hier.c over
 * mpi/mpi.c). Process = worker; rank 0 is the chief.
 *
 * Input (TensorFlow's AutoShardPolicy): every worker runs the same input
 * pipeline (same seed). With DATA (the default; AUTO resolves to it, as
 * Strata's datasets are not split into files) worker w keeps its contiguous
 * share of each global batch, the slice st__split gives it. (TensorFlow's
 * DATA keeps every W-th element of the stream: the same examples per step,
 * grouped differently. Contiguous shares make W workers of L replicas split a
 * batch as W*L mirrored replicas do, so 2 one-replica workers reproduce a
 * 2-thread single process bit for bit, Adam included.) With OFF each worker
 * trains on all of its own batches and the global batch is their union. Before each
 * step the workers exchange their batch sizes: the pass ends for all of them
 * as soon as one has no batch left (no worker runs an extra step), and with
 * DATA every worker must have drawn the same global batch.
 *
 * Each worker's replicas split its share; the loss is scaled by 1/global
 * batch, gradients are summed over every replica of every worker in a fixed
 * order, so the update equals the single-device one (up to float rounding)
 * and repeats are bit-identical. Loss and metric sums are gathered from every
 * worker and added in rank order, so callbacks (EarlyStopping, schedules)
 * decide the same thing everywhere.
 *
 * Consistency: at attach, every worker's model structure, parameter count,
 * optimizer, loss, replicas and seed are compared with rank 0's; at the start
 * of fit, the batch size, steps, epochs and resume position. A difference
 * fails on every worker before step 1, naming the rank and the field.
 *
 * Each thread that communicates across processes has a transport of its own:
 * the control exchanges (this file, caller's thread), the replica group
 * (broadcasts, synchronized BatchNorm, moving statistics) and the gradient
 * reducer (communication threads). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "distribute/collective/collective.h"
#include "distribute/mirrored.h"
#include "distribute/replica_group.h"

struct st_cluster {
  int rank, size;
  int node_procs;         /* workers on this machine: they share its cores */
  st_auto_shard shard;
  double timeout;
  st_collective *ctl, *net_group, *net_reducer;
  int global;             /* the agreed global batch of the coming step */
};

/* ---- consistency checks ---------------------------------------------------- */
typedef struct config_record { /* int64 fields only: exchanged as bytes */
  int64_t layers, structure_crc, params, state, optimizer, loss, learning_rate_bits,
      local_replicas, seed, dtype_bytes;
  int64_t global_batch, steps_per_epoch, epochs, resume_epoch, resume_step;
} config_record;
static const struct {
  const char *name;
  size_t off;
} g_fields[] = {
    {"number of layers", offsetof(config_record, layers)},
    {"layer structure (types, names, shapes)", offsetof(config_record, structure_crc)},
    {"parameter count", offsetof(config_record, params)},
    {"state (moving statistics) count", offsetof(config_record, state)},
    {"optimizer", offsetof(config_record, optimizer)},
    {"loss", offsetof(config_record, loss)},
    {"learning rate (bits)", offsetof(config_record, learning_rate_bits)},
    {"local replicas (--devices)", offsetof(config_record, local_replicas)},
    {"seed", offsetof(config_record, seed)},
    {"dtype size", offsetof(config_record, dtype_bytes)},
    {"global batch size", offsetof(config_record, global_batch)},
    {"steps per epoch (dataset size / batch)", offsetof(config_record, steps_per_epoch)},
    {"epochs", offsetof(config_record, epochs)},
    {"resume epoch (--backup-dir)", offsetof(config_record, resume_epoch)},
    {"resume step (--backup-dir)", offsetof(config_record, resume_step)},
};
#define NFIELDS (sizeof g_fields / sizeof *g_fields)
_Static_assert(NFIELDS * sizeof(int64_t) == sizeof(config_record), "one name per field");

static int64_t field(const config_record *r, size_t i) {
  int64_t v;
  memcpy(&v, (const char *)r + g_fields[i].off, sizeof v);
  return v;
}

/* Gather every worker's record; fail (same verdict everywhere) on the first
 * field, by rank, that differs from rank 0's. */
static st_status compare_records(struct st_cluster *c, const config_record *mine,
                                 const char *when) {
  size_t nf = sizeof *mine / sizeof(float);
  float *all = malloc((size_t)c->size * sizeof *mine);
  if (!all) return st_error(ST_ERR_NOMEM, "multi_worker_mirrored: out of memory");
  float send[sizeof(config_record) / sizeof(float)];
  memcpy(send, mine, sizeof *mine);
  st_status s = c->ctl->vt->all_gather(c->ctl, c->rank, send, nf, all);
  config_record a, b;
  memcpy(&a, all, sizeof a);
  for (int r = 1; s == ST_OK && r < c->size; r++) {
    memcpy(&b, all + (size_t)r * nf, sizeof b);
    for (size_t i = 0; i < NFIELDS && s == ST_OK; i++)
      if (field(&a, i) != field(&b, i))
        s = st_error(ST_ERR_INVALID,
                     "multi_worker_mirrored: %s: rank %d differs from rank 0 in %s: %lld "
                     "(rank 0: %lld); every worker must run the same model and flags",
                     when, r, g_fields[i].name, (long long)field(&b, i), (long long)field(&a, i));
  }
  free(all);
  return s;
}

static uint32_t structure_crc(const st_model *m) {
  uint32_t crc = 0;
  for (int i = 0; i < m->nlayers; i++) {
    const st_layer *l = m->layers[i];
    crc = st_crc32c(crc, l->vt->class_name, strlen(l->vt->class_name));
    crc = st_crc32c(crc, l->name, strlen(l->name));
    crc = st_crc32c(crc, &l->out_shape, sizeof l->out_shape);
    for (int p = 0; p < l->nparams; p++) {
      crc = st_crc32c(crc, l->params[p].name, strlen(l->params[p].name));
      crc = st_crc32c(crc, &l->params[p].shape, sizeof l->params[p].shape);
    }
  }
  return crc;
}

static config_record model_record(const st_strategy *s, const st_model *m) {
  float lr = m->compile.optimizer.lr.initial;
  int32_t lr_bits;
  memcpy(&lr_bits, &lr, sizeof lr_bits);
  return (config_record){.layers = m->nlayers, .structure_crc = structure_crc(m),
                         .params = (int64_t)m->n_params, .state = (int64_t)m->n_state,
                         .optimizer = m->compile.optimizer.kind, .loss = m->compile.loss,
                         .learning_rate_bits = lr_bits, .local_replicas = s->local_replicas,
                         .seed = (int64_t)m->seed, .dtype_bytes = (int64_t)sizeof(float)};
}

st_status st__strategy_check_fit(st_strategy *s, const st_model *m, int64_t global_batch,
                                 int64_t steps_per_epoch, int epochs) {
  struct st_cluster *c = s->cluster;
  if (!c) return ST_OK;
  config_record r = model_record(s, m);
  r.global_batch = global_batch;
  r.steps_per_epoch = steps_per_epoch;
  r.epochs = epochs;
  r.resume_epoch = m->pos.epoch;
  r.resume_step = m->pos.step_in_epoch;
  return compare_records(c, &r, "fit");
}

/* ---- per-step agreement ------------------------------------------------------ */
st_status st__strategy_agree(st_strategy *s, int have_size, bool *go) {
  struct st_cluster *c = s->cluster;
  if (!c) {
    *go = have_size >= 0;
    return ST_OK;
  }
  float mine = (float)have_size, all[64];
  st_status st = c->ctl->vt->all_gather(c->ctl, c->rank, &mine, 1, all);
  if (st != ST_OK) return st;
  *go = true;
  int64_t total = 0;
  for (int r = 0; r < c->size; r++) {
    if (all[r] < 0) *go = false;
    total += (int64_t)all[r];
  }
  if (!*go) return ST_OK;
  if (c->shard == ST_AUTO_SHARD_OFF) {
    c->global = (int)total;
    return ST_OK;
  }
  for (int r = 1; r < c->size; r++)
    if (all[r] != all[0])
      return st_error(ST_ERR_INVALID,
                      "multi_worker_mirrored: rank %d drew a batch of %d examples, rank 0 one "
                      "of %d: with auto-shard DATA every worker must run the same input "
                      "pipeline (same data, batch size and seed)",
                      r, (int)all[r], (int)all[0]);
  c->global = have_size;
  return ST_OK;
}

bool st__strategy_is_chief(const st_strategy *s) { return !s->cluster || s->cluster->rank == 0; }

/* This worker's examples of a global batch: its contiguous share, the rows
 * st__split gives it (no copy). */
static void shard(const struct st_cluster *c, const st_model *m, const st_batch *b,
                  st_batch *out) {
  *out = *b;
  if (c->shard == ST_AUTO_SHARD_OFF || c->size == 1) return;
  size_t xs = st_shape_size(m->input_shape);
  size_t ys = st_loss_is_sparse(m->compile.loss) ? 1 : st__model_output_size(m);
  int start, count;
  st__split(b->size, c->size, c->rank, &start, &count);
  *out = (st_batch){count, b->x + (size_t)start * xs, b->y + (size_t)start * ys};
}

/* out += every worker's stats, added in rank order (the same on every worker). */
static st_status gather_stats(struct st_cluster *c, const st_step_stats *mine, st_step_stats *out) {
  enum { NF = sizeof(st_step_stats) / sizeof(float) };
  float send[NF], all[64 * NF];
  memcpy(send, mine, sizeof *mine);
  st_status s = c->ctl->vt->all_gather(c->ctl, c->rank, send, NF, all);
  for (int r = 0; s == ST_OK && r < c->size; r++) {
    st_step_stats t;
    memcpy(&t, all + (size_t)r * NF, sizeof t);
    st__step_stats_add(out, &t);
  }
  return s;
}

/* ---- the strategy table ------------------------------------------------------- */
static void destroy_transports(struct st_cluster *c) {
  st__collective_destroy(c->net_reducer);
  st__collective_destroy(c->net_group);
  st__collective_destroy(c->ctl);
  c->net_reducer = c->net_group = c->ctl = NULL;
}

static st_status mw_attach(st_strategy *s, st_model *m) {
  struct st_cluster *c = s->cluster;
  /* a single local replica uses its share of the machine's cores */
  if (!s->opts.threads) s->opts.threads = st__cpu_count() / c->node_procs;
  if (s->opts.threads < 1) s->opts.threads = 1;
  st_status st = st__collective_mpi_create(c->timeout, &m->step, &c->ctl);
  if (st == ST_OK) {
    config_record r = model_record(s, m);
    r.global_batch = r.steps_per_epoch = r.epochs = r.resume_epoch = r.resume_step = 0;
    st = compare_records(c, &r, "model");
  }
  if (st == ST_OK) st = st__collective_mpi_create(c->timeout, &m->step, &c->net_group);
  if (st == ST_OK) st = st__collective_mpi_create(c->timeout, &m->step, &c->net_reducer);
  if (st == ST_OK) st = st__mirrored_attach(s, m, c->net_group, c->net_reducer);
  if (st != ST_OK) destroy_transports(c);
  return st;
}

static void mw_detach(st_strategy *s) {
  st__mirrored_detach(s);
  destroy_transports(s->cluster);
}

static st_status mw_train_step(st_strategy *s, st_model *m, const st_batch *b,
                               st_step_stats *out) {
  struct st_cluster *c = s->cluster;
  st_batch local;
  st_step_stats mine = {0};
  shard(c, m, b, &local);
  st_status st = st__mirrored_train_step(s, m, &local, c->global, &mine);
  return st == ST_OK ? gather_stats(c, &mine, out) : st;
}

/* Evaluation: each worker its shard, sums gathered. Predictions (pred set):
 * every worker computes the whole batch, so each has all of them. */
static st_status mw_eval_step(st_strategy *s, st_model *m, const st_batch *b, st_step_stats *out,
                              float *pred) {
  struct st_cluster *c = s->cluster;
  if (pred) return st__group_eval(s->group, m, b, out, pred);
  st_batch local;
  st_step_stats mine = {0};
  shard(c, m, b, &local);
  st_status st = st__group_eval(s->group, m, &local, &mine, NULL);
  return st == ST_OK ? gather_stats(c, &mine, out) : st;
}

static void mw_sync_to_model(st_strategy *s, st_model *m) { (void)s, (void)m; }

/* Weights were loaded into the model: every worker loaded the same file, the
 * broadcast from rank 0 makes sure the replicas agree bit for bit. */
static void mw_sync_from_model(st_strategy *s, st_model *m) {
  (void)m;
  (void)st__mirrored_sync_from_model(s);
}

const st_strategy_vtable st__multi_worker_vtable = {
    .name = "multi_worker_mirrored",
    .attach = mw_attach,
    .detach = mw_detach,
    .train_step = mw_train_step,
    .eval_step = mw_eval_step,
    .sync_to_model = mw_sync_to_model,
    .sync_from_model = mw_sync_from_model,
};

st_status st__cluster_create(const st_strategy_options *o, struct st_cluster **out) {
  *out = NULL;
  int rank = 0, size = 1;
  st_status s = st__mpi_world(&rank, &size);
  if (s != ST_OK) return st_error_prefix(s, "multi_worker_mirrored: ");
  if (size > 64)
    return st_error(ST_ERR_INVALID, "multi_worker_mirrored: %d workers (at most 64)", size);
  if (o->auto_shard < 0 || o->auto_shard >= ST_AUTO_SHARD_COUNT)
    return st_error(ST_ERR_INVALID, "multi_worker_mirrored: auto_shard %d out of range",
                    (int)o->auto_shard);
  if (o->auto_shard == ST_AUTO_SHARD_FILE)
    return st_error(ST_ERR_INVALID, "multi_worker_mirrored: auto-shard FILE needs a dataset "
                    "read from at least as many files as workers; Strata's datasets are "
                    "in memory (use data or off)");
  if (o->collective_timeout < 0 || o->collective_timeout != o->collective_timeout)
    return st_error(ST_ERR_INVALID, "multi_worker_mirrored: collective timeout %g s",
                    o->collective_timeout);
  struct st_cluster *c = calloc(1, sizeof *c);
  if (!c) return st_error(ST_ERR_NOMEM, "multi_worker_mirrored: out of memory");
  c->rank = rank;
  c->size = size;
  c->shard = o->auto_shard == ST_AUTO_SHARD_OFF ? ST_AUTO_SHARD_OFF : ST_AUTO_SHARD_DATA;
  c->timeout = o->collective_timeout > 0 ? o->collective_timeout : ST_DEFAULT_COLLECTIVE_TIMEOUT;
  c->node_procs = st__mpi_node_size();
  *out = c;
  return ST_OK;
}

void st__cluster_destroy(struct st_cluster *c) {
  if (!c) return;
  destroy_transports(c);
  free(c);
}

int st_strategy_worker_rank(const st_strategy *s) { return s->cluster ? s->cluster->rank : 0; }
int st_strategy_worker_count(const st_strategy *s) { return s->cluster ? s->cluster->size : 1; }
bool st_strategy_is_chief(const st_strategy *s) { return st__strategy_is_chief(s); }
