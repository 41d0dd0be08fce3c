/* Strategy registry: names, default options, creation (each kind's table
 * checks its own options), the counted training step, and the worker-level
 * calls fit makes (agree on the next step, barrier, check fit's arguments,
 * who is chief), which are trivial in one process and go to the cluster
 * (cluster.c) otherwise. Above the strategies: it reaches them only through
 * their tables. */
#include "distribute/strategy.h"
#include "backend/cuda.h"
#include "distribute/devices.h"
#include "distribute/gpu_devices.h"

#include <stdio.h>
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

/* The strategy of each kind (NULL: not created here). */
static const st_strategy_vtable *const tables[] = {
    &st__one_device_vtable, &st__mirrored_vtable, &st__central_storage_vtable,
    &st__multi_worker_vtable, NULL, &st__pipeline_vtable};
_Static_assert(sizeof tables / sizeof *tables == ST_STRATEGY_COUNT, "one table per kind");

/* The options every strategy shares, after its own check. */
static st_status check_common(const st_strategy_options *o, const st_strategy_vtable *vt) {
  if (o->shard_optimizer && !vt->shards_optimizer)
    return st_error(ST_ERR_INVALID, "strategy %s: shard_optimizer needs mirrored or "
                    "multi_worker_mirrored (each replica must hold its own copy of the weights)",
                    st_strategy_kind_name(o->kind));
  if (o->threads < 0)
    return st_error(ST_ERR_INVALID, "strategy: threads %d (must be >= 0)", o->threads);
  return ST_OK;
}

_Static_assert(ST_NET_MAX_REPLICAS == ST_MAX_REPLICAS, "the net's device table holds every replica");

/* The strategies that run on GPUs, and what they do not do there yet. */
static st_status check_gpus(const st_strategy_options *o, const st__device_plan_t *d) {
  if (!d->on_gpus) return ST_OK;
  if (o->kind != ST_STRATEGY_ONE_DEVICE && o->kind != ST_STRATEGY_MIRRORED &&
      o->kind != ST_STRATEGY_CENTRAL_STORAGE && o->kind != ST_STRATEGY_MULTI_WORKER_MIRRORED)
    return st_error(ST_ERR_NOT_BUILT, "strategy %s does not run on GPUs in this version "
                    "(one_device, mirrored, central_storage and multi_worker_mirrored do); "
                    "use cpu devices", st_strategy_kind_name(o->kind));
  if (o->shard_optimizer)
    return st_error(ST_ERR_NOT_BUILT, "shard_optimizer does not run on GPUs in this version; "
                    "leave it off or use cpu devices");
  return ST_OK;
}

/* mirrored and central_storage given neither devices nor replicas take
 * every GPU (times logical_gpus) when the machine has any, as TensorFlow's
 * do; a machine without a usable GPU keeps one CPU replica per core. */
static bool default_to_gpus(const st_strategy_options *o, st_strategy_options *out, char *list,
                            size_t cap) {
  if ((o->kind != ST_STRATEGY_MIRRORED && o->kind != ST_STRATEGY_CENTRAL_STORAGE) ||
      o->devices || o->replicas)
    return false;
  int count = 0;
  if (st__cuda_device_count(&count) != ST_OK || count <= 0) {
    st_clear_error();
    return false;
  }
  int n = count * (o->logical_gpus > 0 ? o->logical_gpus : 1);
  if (n > ST_MAX_REPLICAS) n = ST_MAX_REPLICAS;
  size_t at = 0;
  for (int i = 0; i < n && at < cap; i++)
    at += (size_t)snprintf(list + at, cap - at, "%sgpu:%d", i ? "," : "", i);
  *out = *o;
  out->devices = list;
  st_log(ST_LOG_INFO, "strategy %s: devices %s (every GPU; give devices to choose)",
         st_strategy_kind_name(o->kind), list);
  return true;
}

static st_strategy *make(const st_strategy_options *o, const st_strategy_vtable *vt,
                         const st__strategy_setup *u) {
  st_strategy *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->vt = vt;
  st->vars = u->vars;
  st->opts = *o;
  st->opts.device = st->opts.devices = st->opts.cross_device_ops = NULL;
  st->opts.stage_boundaries = NULL;
  st->pipeline_stages = u->pipeline_stages;
  memcpy(st->pipeline_bounds, u->pipeline_bounds, sizeof st->pipeline_bounds);
  st->local_replicas = u->local_replicas;
  st->cluster = u->cluster;
  st->num_replicas = u->num_replicas ? u->num_replicas
                                     : u->local_replicas * st_strategy_worker_count(st);
  st->cross_device_ops = u->cross_device_ops;
  return st;
}

st_status st_strategy_create(const st_strategy_options *o, st_strategy **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_strategy_create: out is NULL");
  *out = NULL;
  if (!o) return st_error(ST_ERR_INVALID, "st_strategy_create: o is NULL");
  if (o->kind < 0 || o->kind >= ST_STRATEGY_COUNT)
    return st_error(ST_ERR_INVALID, "strategy kind %d out of range", (int)o->kind);
  const st_strategy_vtable *vt = tables[o->kind];
  if (!vt)
    return st_error(ST_ERR_NOT_BUILT,
                    "strategy '%s' is not available through st_strategy_create in this version of "
                    "Strata: its C API is strata/ps.h (st_ps_train on the chief, st_ps_server_run on "
                    "workers and ps, st_ps_coordinator_* for custom loops), or the CLI (strata launch, "
                    "strata server, strata train --strategy parameter_server); one_device, mirrored, "
                    "central_storage and multi_worker_mirrored are",
                    st_strategy_kind_name(o->kind));
  st_status s = st__logical_gpus_check(o);
  if (s != ST_OK) return s;
  st_strategy_options all_gpus;
  char list[ST_MAX_REPLICAS * 8];
  if (default_to_gpus(o, &all_gpus, list, sizeof list)) o = &all_gpus;
  st__strategy_setup u = {.local_replicas = 1, .cross_device_ops = ST_CROSS_ALL_REDUCE};
  s = vt->check(o, &u);
  if (s == ST_OK) s = check_common(o, vt);
  st__device_plan_t d;
  if (s == ST_OK) s = st__device_plan(o, u.local_replicas, &d);
  if (s == ST_OK) s = check_gpus(o, &d);
  st_strategy *st = s == ST_OK ? make(o, vt, &u) : NULL;
  if (s == ST_OK && !st) s = st_error(ST_ERR_NOMEM, "strategy: out of memory");
  const st__cuda_module *cm = NULL;
  if (st && d.on_gpus && st__cuda_load(&cm) == ST_OK && cm->set_tf32) cm->set_tf32(o->tf32);
  if (st) {
    st->on_gpus = d.on_gpus;
    memcpy(st->gpu_of, d.gpu_of, sizeof st->gpu_of);
  }
  if (s != ST_OK) {
    st__cluster_destroy(u.cluster);
    return s;
  }
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

st_status st__strategy_train_step(st_strategy *s, st_net *m, const st_batch *b,
                                  const st__side_task *side, st_step_stats *out) {
  st_status st = s->vt->train_step(s, m, b, side, out);
  if (st == ST_OK) m->step++;
  return st;
}

st_strategy_kind st_strategy_kind_of(const st_strategy *s) {
  return s ? s->opts.kind : ST_STRATEGY_ONE_DEVICE;
}
int st_strategy_num_replicas_in_sync(const st_strategy *s) { return s ? s->num_replicas : 0; }

int st_strategy_worker_rank(const st_strategy *s) {
  return s && s->cluster ? st__cluster_rank(s->cluster) : 0;
}
int st_strategy_worker_count(const st_strategy *s) {
  return s && s->cluster ? st__cluster_size(s->cluster) : 1;
}
bool st_strategy_is_chief(const st_strategy *s) { return st__strategy_is_chief(s); }
bool st__strategy_is_chief(const st_strategy *s) { return st_strategy_worker_rank(s) == 0; }

st_status st__strategy_reentry(const st_strategy *s, const char *fn, bool fit_ok) {
  int busy = s ? __atomic_load_n(&s->busy, __ATOMIC_ACQUIRE) : ST__BUSY_IDLE;
  if (busy == ST__BUSY_RUN)
    return st_error(ST_ERR_INVALID, "%s: cannot be called from inside st_strategy_run's step "
                    "function (the strategy is running it)", fn);
  if (busy == ST__BUSY_FIT && !fit_ok)
    return st_error(ST_ERR_INVALID, "%s: cannot be called from inside st_model_fit (a callback "
                    "or a map function of its data: the strategy is running fit)", fn);
  return ST_OK;
}

st_status st__strategy_enter(st_strategy *s, int what, const char *fn) {
  int idle = ST__BUSY_IDLE;
  if (__atomic_compare_exchange_n(&s->busy, &idle, what, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE))
    return ST_OK;
  return st__strategy_reentry(s, fn, false);
}

void st__strategy_leave(st_strategy *s) {
  __atomic_store_n(&s->busy, ST__BUSY_IDLE, __ATOMIC_RELEASE);
}

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
  return st__cluster_check_fit(s->cluster, m, global_batch, steps_per_epoch, epochs, resume_epoch,
                               resume_step);
}
