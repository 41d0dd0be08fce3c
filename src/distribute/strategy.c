/* Strategy registry: names, default options, creation and the pieces every
 * strategy shares: the step metrics, and the worker-level calls fit makes
 * (agree on the next step, barrier, check fit's arguments, who is chief),
 * which are trivial in one process and go to the cluster (multi_worker.c)
 * otherwise. */
#include "distribute/collective/collective.h"
#include "distribute/replica_group.h"
#include "distribute/gpu_devices.h"

#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
    "one_device", "mirrored", "central_storage", "multi_worker_mirrored",
    "parameter_server", "pipeline"};
_Static_assert(sizeof kind_names / sizeof *kind_names == ST_STRATEGY_COUNT,
               "one name per strategy kind");

const char *st_strategy_kind_name(st_strategy_kind k) {
  return (k >= 0 && k < ST_STRATEGY_COUNT) ? kind_names[k] : "unknown";
}

st_status st_strategy_kind_parse(const char *name, st_strategy_kind *out) {
  if (!name || !out)
    return st_error(ST_ERR_INVALID, "st_strategy_kind_parse: %s is NULL", name ? "out" : "name");
  for (int k = 0; k < ST_STRATEGY_COUNT; k++)
    if (strcmp(name, kind_names[k]) == 0) {
      *out = (st_strategy_kind)k;
      return ST_OK;
    }
  return st_error(ST_ERR_INVALID,
                  "unknown strategy '%s' (expected one_device, mirrored, "
                  "central_storage, multi_worker_mirrored, parameter_server or pipeline)",
                  name);
}

st_status st_auto_shard_parse(const char *name, st_auto_shard *out) {
  static const char *const names[] = {"auto", "data", "off", "file"};
  _Static_assert(sizeof names / sizeof *names == ST_AUTO_SHARD_COUNT, "one name per policy");
  if (!name || !out)
    return st_error(ST_ERR_INVALID, "st_auto_shard_parse: %s is NULL", name ? "out" : "name");
  for (int k = 0; k < ST_AUTO_SHARD_COUNT; k++)
    if (strcmp(name, names[k]) == 0) {
      *out = (st_auto_shard)k;
      return ST_OK;
    }
  return st_error(ST_ERR_INVALID, "unknown auto-shard policy '%s' (expected auto, data, off or file)",
                  name);
}

st_strategy_options st_strategy_default_options(st_strategy_kind kind) {
  st_strategy_options o;
  memset(&o, 0, sizeof o);
  o.kind = kind;
  o.bytes_per_pack = 4u << 20;
  return o;
}

/* "cpu", "cpu:N" -> ST_OK; a GPU -> checked by gpu_devices.c (logical: GPUs
 * per physical GPU; *gpu set when it exists); anything else invalid. */
static st_status check_device(const char *dev, int len, int logical, bool *gpu) {
  if ((len == 3 && !strncmp(dev, "cpu", 3)) || (len > 4 && !strncmp(dev, "cpu:", 4) &&
                                                (int)strspn(dev + 4, "0123456789") == len - 4))
    return ST_OK;
  bool is_gpu = false;
  st_status s = st__gpu_device_check(dev, len, logical, &is_gpu);
  if (is_gpu && s == ST_OK) *gpu = true;
  if (is_gpu) return s;
  return st_error(ST_ERR_INVALID, "device '%.*s': expected cpu:N or gpu:N", len, dev);
}

/* "cpu:0,cpu:1" -> 2 replicas; devices must be distinct. */
static st_status count_devices(const char *list, int logical, int *n) {
  *n = 0;
  bool gpu = false;
  for (const char *p = list; *p;) {
    int len = (int)strcspn(p, ",");
    st_status s = check_device(p, len, logical, &gpu);
    if (s != ST_OK) return s;
    for (const char *q = list; q < p; q += strcspn(q, ",") + 1)
      if ((int)strcspn(q, ",") == len && !strncmp(q, p, (size_t)len))
        return st_error(ST_ERR_INVALID, "devices '%s': '%.*s' is listed twice", list, len, p);
    (*n)++;
    p += len;
    if (*p == ',') p++;
  }
  if (*n == 0) return st_error(ST_ERR_INVALID, "devices '%s': no device given", list);
  return gpu ? st__gpu_not_run_yet(list) : ST_OK;
}

/* Entries of a device list as count_devices walks it (a trailing comma ends
 * the list), in one pass over the string: size_t, so any length is safe. */
static size_t count_entries(const char *list) {
  size_t n = *list != '\0';
  for (const char *p = list; (p = strchr(p, ',')) != NULL; p++) n += p[1] != '\0';
  return n;
}

/* The one check of the local replica count against ST_MAX_REPLICAS (the
 * per-replica tables are sized by it), before anything walks the list. */
static st_status check_replica_limit(const st_strategy_options *o) {
  if (o->devices) {
    size_t n = count_entries(o->devices);
    if (n > ST_MAX_REPLICAS)
      return st_error(ST_ERR_INVALID, "devices '%.32s%s': %zu devices given, at most %d "
                      "(ST_MAX_REPLICAS)", o->devices, strlen(o->devices) > 32 ? "..." : "",
                      n, ST_MAX_REPLICAS);
  }
  if (o->replicas > ST_MAX_REPLICAS)
    return st_error(ST_ERR_INVALID, "replicas: %d replicas given, at most %d (ST_MAX_REPLICAS)",
                    o->replicas, ST_MAX_REPLICAS);
  if (o->replicas < 0)
    return st_error(ST_ERR_INVALID, "replicas: %d given, expected 1..%d (ST_MAX_REPLICAS; 0 = one "
                    "per core)", o->replicas, ST_MAX_REPLICAS);
  return ST_OK;
}

static st_status replica_count(const st_strategy_options *o, int *n) {
  if (o->devices && o->replicas)
    return st_error(ST_ERR_INVALID, "strategy: give devices or replicas, not both");
  st_status s = check_replica_limit(o);
  if (s != ST_OK) return s;
  if (o->devices) return count_devices(o->devices, o->logical_gpus, n);
  *n = o->replicas ? o->replicas : st__cpu_count();
  if (*n > ST_MAX_REPLICAS) *n = ST_MAX_REPLICAS;
  return ST_OK;
}

st_status st_strategy_create(const st_strategy_options *o, st_strategy **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_strategy_create: out is NULL");
  *out = NULL;
  if (!o) return st_error(ST_ERR_INVALID, "st_strategy_create: o is NULL");
  const st_strategy_vtable *vt = NULL;
  int n = 1, cross = ST_CROSS_ALL_REDUCE;
  struct st_cluster *cluster = NULL;
  st_status s = ST_OK;
  int pipe_bounds[ST_MAX_REPLICAS], pipe_stages = 0;
  s = st__logical_gpus_check(o);
  if (s != ST_OK) return s;
  switch (o->kind) {
    case ST_STRATEGY_ONE_DEVICE:
      vt = &st__one_device_vtable;
      if (o->device) {
        bool gpu = false;
        s = check_device(o->device, (int)strlen(o->device), o->logical_gpus, &gpu);
        if (s == ST_OK && gpu) s = st__gpu_not_run_yet(o->device);
      }
      break;
    case ST_STRATEGY_MIRRORED:
    case ST_STRATEGY_CENTRAL_STORAGE:
      vt = o->kind == ST_STRATEGY_MIRRORED ? &st__mirrored_vtable : &st__central_storage_vtable;
      s = replica_count(o, &n);
      if (s == ST_OK && o->cross_device_ops)
        s = st__cross_device_ops_parse(o->cross_device_ops, (st_cross_device_ops *)&cross);
      break;
    case ST_STRATEGY_MULTI_WORKER_MIRRORED:
      vt = &st__multi_worker_vtable;
      s = o->devices || o->replicas ? replica_count(o, &n) : ST_OK;
      if (s == ST_OK && o->cross_device_ops)
        s = st__cross_device_ops_parse(o->cross_device_ops, (st_cross_device_ops *)&cross);
      if (s == ST_OK) s = st__cluster_create(o, &cluster);
      break;
    case ST_STRATEGY_PIPELINE:
      vt = &st__pipeline_vtable;
      s = o->devices ? replica_count(o, &pipe_stages) : ST_OK; /* one stage per device */
      if (s == ST_OK) s = st__pipeline_check_options(o, pipe_bounds, &pipe_stages);
      if (s == ST_OK && !st__pipeline_launched() && st__tf_config_training_tasks() > 1)
        s = st_error(ST_ERR_INVALID, "pipeline: TF_CONFIG names %d workers, but the pipeline "
                     "across processes runs under an MPI launcher only (mpirun -np N); "
                     "TF_CONFIG launches are for multi_worker_mirrored",
                     st__tf_config_training_tasks());
      if (s == ST_OK && st__pipeline_launched()) s = st__cluster_create(o, &cluster);
      if (s == ST_OK && cluster)
        s = st__pipeline_check_processes(st__cluster_size(cluster), &pipe_stages);
      break;
    case ST_STRATEGY_PARAMETER_SERVER:
      return st_error(ST_ERR_NOT_BUILT,
                      "strategy '%s' is not available through st_strategy_create in this version of "
                      "Strata: its C API is strata/ps.h (st_ps_train on the chief, st_ps_server_run on "
                      "workers and ps, st_ps_coordinator_* for custom loops), or the CLI (strata launch, "
                      "strata server, strata train --strategy parameter_server); one_device, mirrored, "
                      "central_storage and multi_worker_mirrored are",
                      st_strategy_kind_name(o->kind));
    default:
      return st_error(ST_ERR_INVALID, "strategy kind %d out of range", (int)o->kind);
  }
  if (s == ST_OK && o->shard_optimizer && o->kind != ST_STRATEGY_MIRRORED &&
      o->kind != ST_STRATEGY_MULTI_WORKER_MIRRORED)
    s = st_error(ST_ERR_INVALID, "strategy %s: shard_optimizer needs mirrored or "
                 "multi_worker_mirrored (each replica must hold its own copy of the weights)",
                 st_strategy_kind_name(o->kind));
  if (s == ST_OK && o->threads < 0)
    s = st_error(ST_ERR_INVALID, "strategy: threads %d (must be >= 0)", o->threads);
  st_strategy *st = s == ST_OK ? calloc(1, sizeof *st) : NULL;
  if (s == ST_OK && !st) s = st_error(ST_ERR_NOMEM, "strategy: out of memory");
  if (s != ST_OK) {
    st__cluster_destroy(cluster);
    return s;
  }
  st->vt = vt;
  st->opts = *o;
  st->opts.device = st->opts.devices = st->opts.cross_device_ops = NULL;
  st->opts.stage_boundaries = NULL;
  st->pipeline_stages = pipe_stages;
  for (int i = 0; i + 1 < pipe_stages; i++) st->pipeline_bounds[i] = pipe_bounds[i];
  st->local_replicas = n;
  st->cluster = cluster;
  st->num_replicas = n * st_strategy_worker_count(st);
  st->cross_device_ops = cross;
  if (o->kind == ST_STRATEGY_PIPELINE) /* data-parallel copies of the pipeline */
    st->num_replicas = cluster ? st__cluster_size(cluster) / pipe_stages : 1;
  if (o->kind == ST_STRATEGY_PIPELINE && cluster) st__pipeline_procs_hooks(st);
  *out = st;
  return ST_OK;
}

static void free_strategy(st_strategy *s) {
  if (s->net) s->vt->detach(s);
  st__cluster_destroy(s->cluster);
  free(s);
}

/* With models still holding s: they keep it (and refuse their verbs, naming
 * the destroyed strategy) until the last one is destroyed. */
void st_strategy_destroy(st_strategy *s) {
  if (!s || s->destroyed) return;
  s->destroyed = true;
  if (s->models == 0) free_strategy(s);
}

st_status st__strategy_hold(st_strategy *s) {
  if (s->destroyed)
    return st_error(ST_ERR_INVALID, "st_sequential_create: o->strategy was destroyed");
  s->models++;
  return ST_OK;
}

void st__strategy_release(st_strategy *s) {
  if (!s) return;
  if (--s->models == 0 && s->destroyed) free_strategy(s);
}

st_strategy_kind st_strategy_kind_of(const st_strategy *s) {
  return s ? s->opts.kind : ST_STRATEGY_ONE_DEVICE;
}
int st_strategy_num_replicas_in_sync(const st_strategy *s) { return s ? s->num_replicas : 0; }

void st__step_metrics(const st_net *m, const float *pred, const float *y,
                      int rows, st_step_stats *out) {
  if (rows <= 0 || m->nmetrics == 0 || !y) return; /* y NULL: no labels (predict) */
  int cols = (int)st__net_output_size(m);
  st_metric_kind k = m->metrics[0];
  out->correct += st_metric_correct(k, m->loss, rows, cols, pred, y);
  bool binary = k == ST_METRIC_BINARY_ACCURACY ||
                (k == ST_METRIC_ACCURACY && (m->loss == ST_LOSS_BCE ||
                                             m->loss == ST_LOSS_BCE_LOGITS));
  out->metric_count += binary ? (int64_t)rows * cols : rows;
}

int st_strategy_worker_rank(const st_strategy *s) {
  return s && s->cluster ? st__cluster_rank(s->cluster) : 0;
}
int st_strategy_worker_count(const st_strategy *s) {
  return s && s->cluster ? st__cluster_size(s->cluster) : 1;
}
bool st_strategy_is_chief(const st_strategy *s) { return st__strategy_is_chief(s); }
bool st__strategy_is_chief(const st_strategy *s) { return st_strategy_worker_rank(s) == 0; }

st_status st__strategy_agree(st_strategy *s, int have_size, bool stop_here, bool *go,
                             bool *stop) {
  bool unused;
  if (!stop) stop = &unused;
  if (s->cluster) return st__cluster_agree(s->cluster, have_size, stop_here, go, stop);
  *go = have_size >= 0;
  *stop = stop_here;
  return ST_OK;
}

st_status st__strategy_barrier(st_strategy *s) {
  return s->cluster ? st__cluster_barrier(s->cluster) : ST_OK;
}

bool st__strategy_auto_shard(const st_strategy *s, int *workers, int *rank) {
  if (!s || !s->cluster || s->opts.kind != ST_STRATEGY_MULTI_WORKER_MIRRORED ||
      st__cluster_auto_shard(s->cluster) != ST_AUTO_SHARD_AUTO || st__cluster_size(s->cluster) < 2)
    return false;
  *workers = st__cluster_size(s->cluster);
  *rank = st__cluster_rank(s->cluster);
  return true;
}

void st__strategy_file_shard(st_strategy *s, bool on) {
  if (s && s->cluster)
    st__cluster_set_shard(s->cluster, on ? ST_AUTO_SHARD_OFF : ST_AUTO_SHARD_DATA);
}

st_status st__strategy_check_fit(st_strategy *s, const st_net *m, int64_t global_batch,
                                 int64_t steps_per_epoch, int epochs, int64_t resume_epoch,
                                 int64_t resume_step) {
  if (!s->cluster) return ST_OK;
  return st__cluster_check_fit(s, m, global_batch, steps_per_epoch, epochs, resume_epoch,
                               resume_step);
}
