/* The cluster: the processes of a job (an MPI launch, or TF_CONFIG workers
 * over Gloo) as workers of one strategy (multi_worker_mirrored, the pipeline
 * across processes). Process = worker; rank 0 is the chief. Below the
 * strategies: it owns the control transport (caller's thread) and any
 * further process transports a strategy asks for,
 * and does the worker-level work fit and custom loops need: membership,
 * the per-step agreement on the batch, the barrier, the consistency checks
 * of model and fit arguments, the auto-shard policy and this worker's share
 * of a batch, the all-gather of every worker's step sums.
 *
 * Consistency: when a model is attached, every worker's model structure,
 * parameter count, optimizer, loss, replicas, seed and synchronized
 * (collective-running) layers are compared with rank 0's; at the start of fit, the batch size, steps, epochs and resume
 * position. A difference fails on every worker before step 1, naming the
 * rank and the field; for the model's structure, the first tensor that
 * differs (its name in the saved weights, both shapes) or, when the tensors
 * agree, the first layer.
 *
 * Agreement: before each step the workers exchange their batch sizes: the
 * pass ends for all of them as soon as one has no batch left (no worker runs
 * an extra step), and with auto-shard DATA every worker must have drawn the
 * same global batch; with OFF (and FILE) the global batch is their union. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/split.h"
#include "base/sysinfo.h"
#include "distribute/cluster.h"

enum { MAX_EXTRA = 2 }; /* process transports a strategy may ask for */

struct st_cluster {
  int rank, size;
  int node_procs;         /* workers on this machine: they share its cores */
  st_auto_shard shard;
  st_auto_shard configured; /* as created (AUTO kept: fit may resolve it to FILE) */
  double timeout;
  st_collective *ctl;      /* the control transport (caller's thread) */
  int global;             /* the agreed global batch of the coming step */
  st_collective *extra[MAX_EXTRA]; /* st__cluster_transport's, in order made */
  int nextra;
  int local_replicas, shard_optimizer; /* this worker's (compared at open) */
};

/* ---- consistency checks ---------------------------------------------------- */
typedef struct config_record { /* int64 fields only: exchanged as bytes */
  int64_t layers, structure_crc, params, state, optimizer, loss, learning_rate_bits,
      local_replicas, seed, dtype_bytes;
  int64_t global_batch, steps_per_epoch, epochs, resume_epoch, resume_step;
  int64_t shard_optimizer, sync_layers;
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
    {"shard_optimizer (--shard-optimizer)", offsetof(config_record, shard_optimizer)},
    {"layers that run collectives (synchronized BatchNormalization: --sync-batchnorm)",
     offsetof(config_record, sync_layers)},
};
#define NFIELDS (sizeof g_fields / sizeof *g_fields)
enum { STRUCTURE_FIELDS_LAST = 3 }; /* g_fields[0..3]: the model's structure */
_Static_assert(NFIELDS * sizeof(int64_t) == sizeof(config_record), "one name per field");

static int64_t field(const config_record *r, size_t i) {
  int64_t v;
  memcpy(&v, (const char *)r + g_fields[i].off, sizeof v);
  return v;
}

/* ---- describing a model structure that differs ------------------------------
 * The record carries a CRC of the structure only; when it differs, every
 * worker sends the list of its tensors (the names of the saved weights, dtype,
 * shape) and layers (name, class, output shape), and rank 0's list is compared
 * with the differing rank's to name the first tensor (or layer) that differs
 * and both shapes. Exchanged as bytes, in floats. */
typedef struct item_desc {
  char name[ST_NAME_MAX + 32]; /* "dense_1/kernel" (tensor) or "dense_1" (layer) */
  char tag[28];                /* tensor: dtype ("F32"); layer: class name */
  int32_t is_layer;            /* tensors first, then layers */
  int32_t rank, dims[ST_MAX_RANK];
} item_desc;
_Static_assert(sizeof(item_desc) % sizeof(float) == 0, "exchanged as floats");

static int model_items(const st_net *m) {
  int n = m->nlayers;
  for (int i = 0; i < m->nlayers; i++) n += m->layers[i]->nparams;
  return n;
}

static void set_item(item_desc *d, bool layer, const char *tag, st_shape sh) {
  snprintf(d->tag, sizeof d->tag, "%s", tag);
  d->is_layer = layer;
  d->rank = sh.rank;
  for (int k = 0; k < sh.rank && k < ST_MAX_RANK; k++) d->dims[k] = sh.dims[k];
}

/* out[model_items(m)]: every tensor in layer order, then every layer. */
static void describe_model(const st_net *m, item_desc *out) {
  int n = 0;
  for (int i = 0; i < m->nlayers; i++)
    for (int p = 0; p < m->layers[i]->nparams; p++, n++) {
      const st_layer *l = m->layers[i];
      memset(&out[n], 0, sizeof out[n]);
      snprintf(out[n].name, sizeof out[n].name, "%s/%s", l->name, l->params[p].name);
      set_item(&out[n], false, "F32", l->params[p].shape); /* every variable is float32 */
    }
  for (int i = 0; i < m->nlayers; i++, n++) {
    memset(&out[n], 0, sizeof out[n]);
    snprintf(out[n].name, sizeof out[n].name, "%s", m->layers[i]->name);
    set_item(&out[n], true, m->layers[i]->vt->class_name, m->layers[i]->out_shape);
  }
}

static const char *shape_str(const item_desc *d, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int k = 0; k < d->rank && k < ST_MAX_RANK && o < n; k++)
    o += (size_t)snprintf(buf + o, n - o, "%s%d", k ? ", " : "", (int)d->dims[k]);
  if (o < n) snprintf(buf + o, n - o, "]");
  return buf;
}

static bool same_shape(const item_desc *a, const item_desc *b) {
  if (a->rank != b->rank) return false;
  for (int k = 0; k < a->rank && k < ST_MAX_RANK; k++)
    if (a->dims[k] != b->dims[k]) return false;
  return true;
}

static int find_item(const item_desc *d, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return i;
  return -1;
}

/* One tensor (or layer) of rank `has` that rank `lacks` has not. */
static void one_side(char *msg, size_t n, int r, const item_desc *d, int has, int lacks,
                     int n_has, int n_lacks) {
  char a[96];
  if (d->is_layer)
    snprintf(msg, n, "rank %d differs from rank 0 in layer '%s': rank %d has it (%s, output %s), "
             "rank %d has not (rank %d: %d layers, rank %d: %d)", r, d->name, has, d->tag,
             shape_str(d, a, sizeof a), lacks, has, n_has, lacks, n_lacks);
  else
    snprintf(msg, n, "rank %d differs from rank 0 in tensor '%s': rank %d has it (shape %s), rank %d "
             "has not (rank %d: %d tensors, rank %d: %d)", r, d->name, has,
             shape_str(d, a, sizeof a), lacks, has, n_has, lacks, n_lacks);
}

/* First difference between rank 0's list z[nz] and rank r's list y[ny], both
 * of one kind (tensors or layers); false when they are equal. */
static bool diff_items(char *msg, size_t n, int r, const item_desc *z, int nz, const item_desc *y,
                       int ny) {
  char a[96], b[96];
  for (int i = 0; i < nz && i < ny; i++) {
    const item_desc *p = &z[i], *q = &y[i];
    if (strcmp(p->name, q->name)) {
      if (find_item(y, ny, p->name) < 0) one_side(msg, n, r, p, 0, r, nz, ny);
      else if (find_item(z, nz, q->name) < 0) one_side(msg, n, r, q, r, 0, ny, nz);
      else snprintf(msg, n, "rank %d differs from rank 0 in the order of its %ss: #%d is '%s' "
                    "(rank 0: '%s')", r, q->is_layer ? "layer" : "tensor", i + 1, q->name, p->name);
      return true;
    }
    if (strcmp(p->tag, q->tag)) {
      snprintf(msg, n, "rank %d differs from rank 0 in %s '%s': %s %s (rank 0: %s)", r,
               q->is_layer ? "layer" : "tensor", q->name, q->is_layer ? "class" : "dtype", q->tag,
               p->tag);
      return true;
    }
    if (!same_shape(p, q)) {
      snprintf(msg, n, "rank %d differs from rank 0 in %s '%s': %s %s (rank 0: %s)", r,
               q->is_layer ? "layer" : "tensor", q->name, q->is_layer ? "output shape" : "shape",
               shape_str(q, a, sizeof a), shape_str(p, b, sizeof b));
      return true;
    }
  }
  if (nz == ny) return false;
  if (nz > ny) one_side(msg, n, r, &z[ny], 0, r, nz, ny);
  else one_side(msg, n, r, &y[nz], r, 0, ny, nz);
  return true;
}

static int count_tensors(const item_desc *d, int n) {
  int k = 0;
  while (k < n && !d[k].is_layer) k++;
  return k;
}

/* Every worker: exchange the descriptions of rank 0 and rank r (broadcasts,
 * the same calls everywhere) and write their first difference to msg ("" when
 * the lists agree). */
static st_status describe_difference(struct st_cluster *c, const st_net *m, int r, char *msg,
                                     size_t n) {
  enum { W = sizeof(item_desc) / sizeof(float) };
  int mine = model_items(m);
  float counts[ST_MAX_WORKERS], send = 0;
  memcpy(&send, &mine, sizeof mine);
  st_status s = c->ctl->vt->all_gather(c->ctl, c->rank, &send, 1, counts);
  int nz = 0, ny = 0;
  if (s != ST_OK) return s;
  memcpy(&nz, &counts[0], sizeof nz);
  memcpy(&ny, &counts[r], sizeof ny);
  if (nz < 0 || ny < 0 || nz > (1 << 20) || ny > (1 << 20))
    return st_error(ST_ERR_INTERNAL, "multi_worker_mirrored: model descriptions of %d and %d "
                    "items from ranks 0 and %d", nz, ny, r);
  item_desc *z = calloc((size_t)nz + 1, sizeof *z), *y = calloc((size_t)ny + 1, sizeof *y);
  if (!z || !y) s = st_error(ST_ERR_NOMEM, "multi_worker_mirrored: out of memory");
  if (s == ST_OK && c->rank == 0) describe_model(m, z);
  if (s == ST_OK && c->rank == r) describe_model(m, y);
  if (s == ST_OK) s = c->ctl->vt->broadcast(c->ctl, c->rank, (float *)z, (size_t)nz * W, 0);
  if (s == ST_OK) s = c->ctl->vt->broadcast(c->ctl, c->rank, (float *)y, (size_t)ny * W, r);
  msg[0] = '\0';
  if (s == ST_OK) {
    int tz = count_tensors(z, nz), ty = count_tensors(y, ny);
    if (!diff_items(msg, n, r, z, tz, y, ty)) diff_items(msg, n, r, z + tz, nz - tz, y + ty, ny - ty);
  }
  free(z);
  free(y);
  return s;
}

/* Gather every worker's record; fail (same verdict everywhere) on the first
 * field, by rank, that differs from rank 0's. A difference in the model's
 * structure names the first tensor (or layer) that differs. */
static st_status compare_records(struct st_cluster *c, const st_net *m,
                                 const config_record *mine, const char *when) {
  size_t nf = sizeof *mine / sizeof(float);
  float *all = malloc((size_t)c->size * sizeof *mine);
  if (!all) return st_error(ST_ERR_NOMEM, "multi_worker_mirrored: out of memory");
  float send[sizeof(config_record) / sizeof(float)];
  memcpy(send, mine, sizeof *mine);
  st_status s = c->ctl->vt->all_gather(c->ctl, c->rank, send, nf, all);
  config_record a, b;
  memcpy(&a, all, sizeof a);
  int bad_rank = 0;
  size_t bad = NFIELDS; /* the first field that differs; b: that rank's record */
  for (int r = 1; s == ST_OK && bad == NFIELDS && r < c->size; r++) {
    memcpy(&b, all + (size_t)r * nf, sizeof b);
    for (size_t i = 0; i < NFIELDS && bad == NFIELDS; i++)
      if (field(&a, i) != field(&b, i)) bad = i, bad_rank = r;
  }
  free(all);
  if (s != ST_OK || bad == NFIELDS) return s;
  char what[768] = "";
  if (bad <= STRUCTURE_FIELDS_LAST &&
      (s = describe_difference(c, m, bad_rank, what, sizeof what)) != ST_OK)
    return s;
  if (what[0])
    return st_error(ST_ERR_INVALID, "multi_worker_mirrored: %s: %s; every worker must run the "
                    "same model and flags", when, what);
  return st_error(ST_ERR_INVALID,
                  "multi_worker_mirrored: %s: rank %d differs from rank 0 in %s: %lld "
                  "(rank 0: %lld); every worker must run the same model and flags",
                  when, bad_rank, g_fields[bad].name, (long long)field(&b, bad),
                  (long long)field(&a, bad));
}

uint32_t st__net_structure_crc(const st_net *m) {
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
  /* a graph: its wiring too (a chain's CRC stays what Sequential's always was) */
  bool chain = st__net_is_chain(m);
  for (int k = 0; !chain && k < m->nnodes; k++) {
    crc = st_crc32c(crc, &m->nodes[k].layer, sizeof m->nodes[k].layer);
    crc = st_crc32c(crc, m->nodes[k].in, sizeof(int) * (size_t)m->nodes[k].n_in);
  }
  return crc;
}

/* Layers that run collectives in forward (synchronized BatchNormalization):
 * a worker with one that another lacks would pair its all-reduce with the
 * other's next collective. */
static int64_t sync_layers(const st_net *m) {
  int64_t n = 0;
  for (int i = 0; i < m->nlayers; i++) n += m->layers[i]->uses_collectives;
  return n;
}

static config_record model_record(const struct st_cluster *c, const st_net *m) {
  float lr = m->optimizer.lr.initial;
  int32_t lr_bits;
  memcpy(&lr_bits, &lr, sizeof lr_bits);
  return (config_record){.layers = m->nlayers, .structure_crc = st__net_structure_crc(m),
                         .params = (int64_t)m->n_params, .state = (int64_t)m->n_state,
                         .optimizer = m->optimizer.kind, .loss = m->loss,
                         .learning_rate_bits = lr_bits, .local_replicas = c->local_replicas,
                         .seed = (int64_t)m->seed, .dtype_bytes = (int64_t)sizeof(float),
                         .shard_optimizer = c->shard_optimizer, .sync_layers = sync_layers(m)};
}

st_status st__cluster_check_fit(struct st_cluster *c, const st_net *m, int64_t global_batch,
                                int64_t steps_per_epoch, int epochs, int64_t resume_epoch,
                                int64_t resume_step) {
  config_record r = model_record(c, m);
  r.global_batch = global_batch;
  r.steps_per_epoch = steps_per_epoch;
  r.epochs = epochs;
  r.resume_epoch = resume_epoch;
  r.resume_step = resume_step;
  return compare_records(c, m, &r, "fit");
}

/* ---- per-step agreement ------------------------------------------------------ */
st_status st__cluster_agree(struct st_cluster *c, int have_size, bool stop_here, bool *go,
                            bool *stop) {
  /* per worker: its batch size, then whether it was asked to stop */
  float mine[2] = {(float)have_size, stop_here ? 1.0f : 0.0f}, all[2 * ST_MAX_WORKERS];
  st_status st = c->ctl->vt->all_gather(c->ctl, c->rank, mine, 2, all);
  if (st != ST_OK) return st;
  *go = true;
  *stop = false;
  int64_t total = 0;
  for (int r = 0; r < c->size; r++) {
    if (all[2 * r] < 0) *go = false;
    if (all[2 * r + 1] != 0.0f) *stop = true;
    total += (int64_t)all[2 * r];
  }
  if (!*go) return ST_OK;
  if (c->shard == ST_AUTO_SHARD_OFF) {
    c->global = (int)total;
    return ST_OK;
  }
  for (int r = 1; r < c->size; r++)
    if (all[2 * r] != all[0])
      return st_error(ST_ERR_INVALID,
                      "multi_worker_mirrored: rank %d drew a batch of %d examples, rank 0 one "
                      "of %d: with auto-shard DATA every worker must run the same input "
                      "pipeline (same data, batch size and seed)",
                      r, (int)all[2 * r], (int)all[0]);
  c->global = have_size;
  return ST_OK;
}

st_status st__cluster_barrier(struct st_cluster *c) { return c->ctl->vt->barrier(c->ctl, c->rank); }

/* This worker's examples of a global batch: its contiguous share, the rows
 * st__split gives it (no copy). */
void st__cluster_shard_batch(const struct st_cluster *c, const st_net *m, const st_batch *b,
                             st_batch *out) {
  *out = *b;
  if (c->shard == ST_AUTO_SHARD_OFF || c->size == 1) return;
  *out = st__batch_slice(m, b, c->size, c->rank, NULL);
}

/* out += every worker's stats, added in rank order (the same on every worker). */
st_status st__cluster_gather_stats(struct st_cluster *c, const st_step_stats *mine, st_step_stats *out) {
  enum { NF = sizeof(st_step_stats) / sizeof(float) };
  _Static_assert(sizeof(st_step_stats) % sizeof(float) == 0, "exchanged as floats");
  _Static_assert(ST_MAX_WORKERS * sizeof(st_step_stats) <= 64 * 1024,
                 "every worker's stats fit on the stack");
  float send[NF], all[ST_MAX_WORKERS * NF];
  memcpy(send, mine, sizeof *mine);
  st_status s = c->ctl->vt->all_gather(c->ctl, c->rank, send, NF, all);
  for (int r = 0; s == ST_OK && r < c->size; r++) {
    st_step_stats t;
    memcpy(&t, all + (size_t)r * NF, sizeof t);
    st__step_stats_add(out, &t);
  }
  return s;
}

/* why: this worker's error ("" if none), told to the peers that still wait
 * for it (st__collective_process_leave); the transports made last go first. */
static void destroy_transports(struct st_cluster *c, const char *why) {
  for (int i = c->nextra - 1; i >= 0; i--) st__collective_process_leave(c->extra[i], why);
  if (c->ctl) st__collective_process_leave(c->ctl, why);
  for (int i = c->nextra - 1; i >= 0; i--) st__collective_destroy(c->extra[i]);
  st__collective_destroy(c->ctl);
  memset(c->extra, 0, sizeof c->extra);
  c->nextra = 0;
  c->ctl = NULL;
}

st_status st__cluster_create(const st_strategy_options *o, int local_replicas,
                             struct st_cluster **out) {
  *out = NULL;
  int rank = 0, size = 1;
  st_status s = st__process_world(&rank, &size);
  if (s != ST_OK) return st_error_prefix(s, "multi_worker_mirrored: ");
  if (size > ST_MAX_WORKERS)
    return st_error(ST_ERR_INVALID, "multi_worker_mirrored: %d workers (processes) given, at most "
                    "%d (ST_MAX_WORKERS)", size, ST_MAX_WORKERS);
  if (o->auto_shard < 0 || o->auto_shard >= ST_AUTO_SHARD_COUNT)
    return st_error(ST_ERR_INVALID, "multi_worker_mirrored: auto_shard %d out of range",
                    (int)o->auto_shard);
  if (o->collective_timeout < 0 || o->collective_timeout != o->collective_timeout)
    return st_error(ST_ERR_INVALID, "multi_worker_mirrored: collective timeout %g s",
                    o->collective_timeout);
  struct st_cluster *c = calloc(1, sizeof *c);
  if (!c) return st_error(ST_ERR_NOMEM, "multi_worker_mirrored: out of memory");
  c->rank = rank;
  c->size = size;
  /* FILE: each worker's pipeline reads its own files (the caller shards them,
   * st_tfrecord_dataset_options.num_shards / shard_index), so its batches are
   * its own, trained whole as with OFF. */
  c->shard = o->auto_shard == ST_AUTO_SHARD_OFF || o->auto_shard == ST_AUTO_SHARD_FILE
                 ? ST_AUTO_SHARD_OFF : ST_AUTO_SHARD_DATA;
  c->configured = o->auto_shard;
  c->timeout = o->collective_timeout > 0 ? o->collective_timeout : ST_DEFAULT_COLLECTIVE_TIMEOUT;
  c->node_procs = st__process_node_size();
  c->local_replicas = local_replicas;
  c->shard_optimizer = o->shard_optimizer;
  *out = c;
  return ST_OK;
}

void st__cluster_destroy(struct st_cluster *c) {
  if (!c) return;
  destroy_transports(c, st_last_error());
  free(c);
}

st_auto_shard st__cluster_auto_shard(const struct st_cluster *c) { return c->configured; }
void st__cluster_set_shard(struct st_cluster *c, st_auto_shard effective) { c->shard = effective; }
int st__cluster_rank(const struct st_cluster *c) { return c->rank; }
int st__cluster_size(const struct st_cluster *c) { return c->size; }

/* The control transport fit's agree / barrier / check_fit use, after the
 * model consistency check (every worker at once). */
st_status st__cluster_open(struct st_cluster *c, st_net *m) {
  st_status st = st__collective_process_create(c->timeout, &m->step, &c->ctl);
  if (st == ST_OK) {
    config_record r = model_record(c, m);
    st = compare_records(c, m, &r, "model");
  }
  if (st != ST_OK) destroy_transports(c, st_last_error());
  return st;
}

st_status st__cluster_transport(struct st_cluster *c, st_net *m, st_collective **out) {
  ST_ASSERT(c->nextra < MAX_EXTRA);
  st_status st = st__collective_process_create(c->timeout, &m->step, out);
  if (st == ST_OK) c->extra[c->nextra++] = *out;
  return st;
}

void st__cluster_close(struct st_cluster *c, const char *why) { destroy_transports(c, why); }

double st__cluster_timeout(const struct st_cluster *c) { return c->timeout; }

st_status st__cluster_all_gather(struct st_cluster *c, const float *send, size_t n, float *recv) {
  if (!c->ctl)
    return st_error(ST_ERR_INVALID, "multi_worker_mirrored: the strategy is not bound to a "
                    "compiled model (its transport across workers is not open)");
  return c->ctl->vt->all_gather(c->ctl, c->rank, send, n, recv);
}

int st__cluster_node_procs(const struct st_cluster *c) { return c->node_procs; }
int st__cluster_global(const struct st_cluster *c) { return c->global; }
