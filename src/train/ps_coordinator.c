/* The coordinator API (st_ps_coordinator_*, strata/ps.h): closures scheduled
 * one step at a time by the caller, as TensorFlow's ClusterCoordinator. The
 * chief's cluster side is ps/chief*.c's (st__ps_chief_pump hands out the
 * queued steps); the job and its model are train/ps_train.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "train/ps_train.h"

struct st_ps_coordinator {
  st__ps_run r;
  st_ps_train_options o;  /* a copy (its strings borrowed) */
  st__ps_closure *cls;    /* [total_steps]: closure k is step k (handle k) */
  uint32_t *idx;          /* [total_steps * batch]: the examples of each */
  int *count;             /* [total_steps] */
  int64_t scheduled, done;
  st_status failed;       /* a failure of the job: every later call returns it */
  char failure[512];
  bool stopped;
};

/* The failure of the job, kept: the API's later calls report it again. */
static st_status coordinator_fail(st_ps_coordinator *k, st_status s) {
  if (k->failed == ST_OK) {
    k->failed = s;
    snprintf(k->failure, sizeof k->failure, "%s", st_last_error());
  }
  return st_error(k->failed, "%s", k->failure);
}

/* One round: queued closures to free workers, replies, heartbeats, losses. */
static st_status pump(st_ps_coordinator *k, int wait_ms) {
  if (k->failed != ST_OK) return coordinator_fail(k, k->failed);
  st_status s = st__ps_chief_pump(&k->r.c, k->cls, k->scheduled, k->idx, k->count, &k->done, wait_ms);
  return s == ST_OK ? ST_OK : coordinator_fail(k, s);
}

/* The model, the tables of every step, the JOB to every server. */
static st_status coordinator_start(st_ps_coordinator *k) {
  const st_ps_train_options *o = &k->o;
  st__ps_chief *c = &k->r.c;
  st_status s = st__ps_run_model(&k->r);
  size_t total = (size_t)c->job.total_steps;
  if (s == ST_OK && total > 1000000000)
    s = st_error(ST_ERR_INVALID, "st_ps_train_options.epochs: %lld steps in all (at most 10^9 with the "
                 "coordinator API)", (long long)total);
  if (s == ST_OK) {
    k->cls = calloc(total, sizeof *k->cls);
    k->idx = malloc(total * (size_t)o->batch * sizeof *k->idx);
    k->count = calloc(total, sizeof *k->count);
    c->results = calloc(total * 4, sizeof *c->results);
    if (!k->cls || !k->idx || !k->count || !c->results) s = st_error(ST_ERR_NOMEM, "out of memory");
  }
  if (s == ST_OK) s = st__ps_chief_open(c);
  if (s == ST_OK && !o->quiet)
    st__ps_chief_say(c, "parameter_server job %016llx: %d workers, %d ps, up to %lld closures of one "
                     "step (coordinator API, %s)", (unsigned long long)c->job.job_id, c->nw, c->nps,
                     (long long)c->job.total_steps, o->insecure ? "insecure" : "CURVE");
  return s;
}

st_status st_ps_coordinator_create(const st_ps_train_options *o, st_ps_coordinator **out) {
  ST_REQUIRE(o);
  ST_REQUIRE(out);
  *out = NULL;
  st_status s = st__ps_check_options(o);
  if (s != ST_OK) return s;
  if (o->backup_dir || o->ncallbacks)
    return st_error(ST_ERR_INVALID, "st_ps_train_options.%s: not supported by the coordinator API (st_ps_train has it)",
                    o->backup_dir ? "backup_dir" : "callbacks");
  st_ps_coordinator *k = calloc(1, sizeof *k);
  if (!k) return st_error(ST_ERR_NOMEM, "out of memory");
  k->o = *o;
  k->o.steps_per_execution = 1;
  s = st__ps_run_init(&k->r, &k->o, "coordinator");
  if (s == ST_OK) s = coordinator_start(k);
  if (s != ST_OK) {
    st_ps_coordinator_destroy(k);
    return s;
  }
  *out = k;
  return ST_OK;
}

st_status st_ps_coordinator_schedule(st_ps_coordinator *k, const uint32_t *idx, int64_t n, int64_t *handle) {
  ST_REQUIRE(k);
  ST_REQUIRE(idx);
  ST_REQUIRE(handle);
  if (k->failed != ST_OK) return coordinator_fail(k, k->failed);
  st__ps_chief *c = &k->r.c;
  if (k->stopped) return st_error(ST_ERR_INVALID, "st_ps_coordinator_schedule: the job was finished");
  if (n < 1 || n > c->job.batch)
    return st_error(ST_ERR_INVALID, "st_ps_coordinator_schedule: n %lld (must be 1..%lld, the batch size)",
                    (long long)n, (long long)c->job.batch);
  if (k->scheduled >= c->job.total_steps)
    return st_error(ST_ERR_INVALID, "st_ps_coordinator_schedule: the job has %lld steps (epochs x steps per "
                    "epoch), all scheduled", (long long)c->job.total_steps);
  for (int64_t i = 0; i < n; i++)
    if (idx[i] >= (uint64_t)c->n_train)
      return st_error(ST_ERR_INVALID, "st_ps_coordinator_schedule: idx[%lld] = %u (the training set has %lld)",
                      (long long)i, idx[i], (long long)c->n_train);
  int64_t h = k->scheduled++;
  memcpy(k->idx + (size_t)h * (size_t)c->job.batch, idx, (size_t)n * sizeof *idx);
  k->count[h] = (int)n;
  k->cls[h].first = h, k->cls[h].n = 1, k->cls[h].state = 0, k->cls[h].worker = -1;
  *handle = h;
  return pump(k, 0); /* hand it to a free worker now, if any */
}

st_status st_ps_coordinator_join(st_ps_coordinator *k) {
  ST_REQUIRE(k);
  st_status s = ST_OK;
  while (s == ST_OK && k->done < k->scheduled) s = pump(k, 20);
  return s == ST_OK && k->failed ? coordinator_fail(k, k->failed) : s;
}

st_status st_ps_coordinator_fetch(st_ps_coordinator *k, int64_t handle, st_ps_closure_result *out) {
  ST_REQUIRE(k);
  ST_REQUIRE(out);
  if (handle < 0 || handle >= k->scheduled)
    return st_error(ST_ERR_INVALID, "st_ps_coordinator_fetch: handle %lld was not scheduled", (long long)handle);
  st_status s = ST_OK;
  while (s == ST_OK && k->cls[handle].state != 2) s = pump(k, 20);
  if (s != ST_OK) return s;
  const double *v = k->r.c.results + 4 * (size_t)handle;
  out->loss = v[1] > 0 ? v[0] / v[1] : 0;
  out->examples = (int64_t)v[1], out->correct = (int64_t)v[2];
  out->accuracy = v[3] > 0 ? v[2] / v[3] : 0;
  return ST_OK;
}

st_status st_ps_coordinator_finish(st_ps_coordinator *k, st_ps_train_result *out) {
  ST_REQUIRE(k);
  ST_REQUIRE(out);
  memset(out, 0, sizeof *out);
  st_status s = st_ps_coordinator_join(k);
  st__ps_chief *c = &k->r.c;
  uint64_t(*stats)[9] = NULL;
  if (s == ST_OK && !(stats = calloc((size_t)c->nps + 1, sizeof *stats))) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) s = st__ps_chief_gather_stats(c, stats);
  if (s == ST_OK) s = st__ps_chief_pull(c);
  if (s == ST_OK && !(out->per_ps = calloc((size_t)c->nps + 1, sizeof *out->per_ps)))
    s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s != ST_OK) {
    free(stats);
    free(out->per_ps);
    out->per_ps = NULL;
    return coordinator_fail(k, s);
  }
  out->exactly_once = true;
  for (int p = 0; p < c->nps; p++) {
    st__ps_stats_fill(&out->per_ps[p], stats[p]);
    out->exactly_once &= out->per_ps[p].updates_applied == k->scheduled;
  }
  free(stats);
  out->workers = c->nw, out->nps = c->nps, out->steps_per_epoch = c->steps_per_epoch;
  st__ps_run_give_model(&k->r, out);
  st__ps_chief_stop_servers(c);
  k->stopped = true;
  return ST_OK;
}

int64_t st_ps_coordinator_closures_retried(const st_ps_coordinator *k) { return k ? k->r.c.retried : 0; }

void st_ps_coordinator_destroy(st_ps_coordinator *k) {
  if (!k) return;
  if (!k->stopped && k->r.c.cluster.self_role == ST_PS_CHIEF) st__ps_chief_stop_servers(&k->r.c);
  st__ps_run_free(&k->r);
  free(k->cls), free(k->idx), free(k->count);
  free(k);
}
