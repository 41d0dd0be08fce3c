/* The chief of a parameter-server job (st_ps_train, strata/ps.h), the part
 * that needs the model, checkpoints and history: the job built from the
 * options, BackupAndRestore (backups written and read with src/io, the
 * position of a resumed or rolled-back run) and the epoch loop with its
 * callbacks, validation and progress. The cluster side (closures, heartbeats,
 * recovery of a lost ps) is ps/chief*.c's. Lines go to the caller's
 * on_message / on_progress, never to stdout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/args.h"
#include "io/checkpoint.h"
#include "train/ps_train.h"

/* The global step of a position. */
static int64_t pos_step(const st__ps_run *r, const st_train_position *pos) {
  return pos->epoch * r->c.steps_per_epoch + pos->step_in_epoch;
}

/* At a quiescent point: the snapshot (unless the model holds it already),
 * then the usual checkpoint (src/io/checkpoint.c: variables, slots, step,
 * position, identity) into --backup-dir. */
static st_status write_backup(st__ps_run *r, const st_train_position *pos) {
  st__ps_chief *c = &r->c;
  if (!r->a->backup_dir) return ST_OK;
  int64_t b = pos_step(r, pos);
  for (int i = 0; i < pos->nlogs; i++)
    if (pos->logs[i].examples != c->n_train)
      return st_error(ST_ERR_INTERNAL, "backup: epoch %d trained on %lld examples, not the %lld of the "
                      "training set: not written", i + 1, (long long)pos->logs[i].examples,
                      (long long)c->n_train);
  st_status s = c->snapshot_step == b ? ST_OK : st__ps_chief_snapshot(c, b);
  if (s != ST_OK) return s;
  st_checkpoint_options o = st_checkpoint_default_options();
  st__run_identity id = {c->job.batch, r->a->data_fingerprint, false};
  s = st__checkpoint_save_at(st__ps_model_of(&c->model), r->a->backup_dir, &o, pos, &id);
  if (s != ST_OK) return st_error_prefix(s, "backup: ");
  c->backups++, c->done_since_backup = 0, c->backup_step = b;
  return ST_OK;
}

/* The chief's hook (st__ps_chief_config.backup): a backup inside epoch
 * `epoch`, closures [0, k) done, with these sums. */
static st_status backup_hook(void *user, int epoch, int k, const double *sums) {
  st__ps_run *r = user;
  st_train_position pos = {0};
  pos.epoch = epoch, pos.step_in_epoch = (int64_t)k * r->c.job.steps_per_execution;
  pos.loss_sum = sums[0], pos.examples = (int64_t)sums[1], pos.correct = (int64_t)sums[2];
  pos.metric_count = (int64_t)sums[3];
  pos.nlogs = r->fl.pos.nlogs, pos.logs = r->fl.pos.logs;
  return write_backup(r, &pos);
}

/* The chief's hook (st__ps_chief_config.reload): the latest backup of
 * --backup-dir into the chief's model and r->pos (its checksums, names,
 * shapes and the run's identity checked); *step its global step, a closure
 * boundary of this run. */
static st_status reload_hook(void *user, int64_t *step) {
  st__ps_run *r = user;
  st__ps_chief *c = &r->c;
  const char *dir = r->a->backup_dir;
  st_train_position at = {0};
  st__run_identity id = {c->job.batch, r->a->data_fingerprint, r->a->resume_anyway};
  st_status s = st__checkpoint_restore_at(st__ps_model_of(&c->model), dir, &at, &id);
  if (s != ST_OK) return st_error_prefix(s, "backup: cannot resume: ");
  int64_t b = c->model.net->step, spe = c->job.steps_per_execution;
  if (b != pos_step(r, &at) || at.step_in_epoch % spe || at.epoch > r->a->epochs || b > c->job.total_steps) {
    free(at.logs);
    return st_error(ST_ERR_INVALID, "backup: %s: step %lld (epoch %lld, step %lld of it) is not a closure "
                    "boundary of this run (%lld steps per epoch, --steps-per-execution %lld)", dir,
                    (long long)b, (long long)at.epoch + 1, (long long)at.step_in_epoch,
                    (long long)c->steps_per_epoch, (long long)spe);
  }
  free(r->pos.logs);
  r->pos = at;
  *step = b;
  return ST_OK;
}

/* Read the latest backup (reload_hook), then every ps reloads it. */
static st_status restore_backup(st__ps_run *r) {
  int64_t b = 0;
  st_status s = reload_hook(r, &b);
  return s == ST_OK ? st__ps_chief_restore(&r->c, b) : s;
}

/* Go to r->pos (a backup just restored): fit's loop goes on from its epoch,
 * closure and sums, with the epochs it had finished. */
static st_status rewind_to(st__ps_run *r) {
  const st_train_position *p = &r->pos;
  st_train_position *q = &r->fl.pos;
  int n = p->nlogs < r->a->epochs ? p->nlogs : (int)r->a->epochs;
  st_epoch_logs *logs = realloc(q->logs, (size_t)(n + 1) * sizeof *logs);
  if (!logs) return st_error(ST_ERR_NOMEM, "out of memory");
  if (n) memcpy(logs, p->logs, (size_t)n * sizeof *logs);
  /* state.json's history has no example counts: an epoch-end backup is
   * written only once its epoch trained on each example exactly once
   * (write_backup), so each finished epoch of a backup did */
  for (int i = 0; i < n; i++) logs[i].examples = r->c.n_train;
  q->logs = logs, q->nlogs = n;
  q->epoch = p->epoch, q->step_in_epoch = p->step_in_epoch;
  q->loss_sum = p->loss_sum, q->examples = p->examples, q->correct = p->correct;
  q->metric_count = p->metric_count;
  r->fl.rewound = true;
  r->c.rewind = false;
  return ST_OK;
}

/* --backup-dir: resume from its backup when there is one (a rerun after the
 * chief was lost: every ps reloads it), else write one of the start (so a
 * ps lost in the first epoch rolls back to it). No `latest` file is a fresh
 * start; a damaged one is an error (as fit's BackupAndRestore). */
static st_status start_backup(st__ps_run *r) {
  st__ps_chief *c = &r->c;
  const char *dir = r->a->backup_dir;
  r->resumed_step = -1;
  if (!dir) return ST_OK;
  int64_t spe = c->job.steps_per_execution, every = r->a->backup_every;
  c->every_closures = every > 0 ? (every + spe - 1) / spe : 0;
  char latest[4096];
  st_status s = st_checkpoint_latest(dir, latest, sizeof latest);
  if (s != ST_OK) {
    char path[4200];
    snprintf(path, sizeof path, "%s/latest", dir);
    if (access(path, F_OK) == 0) return st_error_prefix(s, "backup: cannot resume: ");
    st_clear_error();
    st_train_position pos = {0};
    return write_backup(r, &pos);
  }
  if ((s = restore_backup(r)) != ST_OK || (s = rewind_to(r)) != ST_OK) return s;
  r->fl.rewound = false;
  r->resumed_step = c->backup_step = pos_step(r, &r->pos);
  if (!r->a->quiet)
    st__ps_chief_say(c, "resuming from %s at epoch %lld, step %lld of it (global step %lld); "
                     "every ps reloaded it\n", latest, (long long)r->pos.epoch + 1,
                     (long long)r->pos.step_in_epoch, (long long)r->resumed_step);
  return ST_OK;
}

/* ---- the chief's closures: fit's step source (train/fit_loop.h) ---- */

static int64_t src_step(void *user, st_model *m, const st__fit_loop *fl) {
  (void)m;
  return pos_step(user, &fl->pos);
}

/* The epoch's closures from the position on; a lost ps (every ps reloaded
 * the backup) rewinds the loop. */
static st_status src_pass(void *user, st_model *m, st__fit_loop *fl, st_step_stats *tot) {
  st__ps_run *r = user;
  (void)m;
  double sums[4] = {tot->loss_sum, (double)tot->examples, (double)tot->correct, (double)tot->metric_count};
  int k0 = (int)(fl->pos.step_in_epoch / r->c.job.steps_per_execution);
  st_status s = st__ps_chief_run_epoch(&r->c, fl->epoch, k0, sums);
  if (s != ST_OK || r->c.rewind) return s == ST_OK ? rewind_to(r) : s;
  tot->loss_sum = sums[0], tot->examples = (int64_t)sums[1], tot->correct = (int64_t)sums[2];
  tot->metric_count = (int64_t)sums[3];
  fl->pos.step_in_epoch = r->c.steps_per_epoch;
  return ST_OK;
}

/* The chief's model gets every ps's variables (and, for callbacks that
 * checkpoint and for the backup, their slots) for validation and the
 * epoch-end callbacks. */
static st_status src_before_end(void *user, st_model *m, st__fit_loop *fl) {
  st__ps_run *r = user;
  st__ps_chief *c = &r->c;
  (void)m;
  int64_t end = (int64_t)(fl->epoch + 1) * c->steps_per_epoch;
  st_status s = ST_OK;
  if (r->fo.ncallbacks || r->a->backup_dir) {
    if ((s = st__ps_chief_snapshot_or_recover(c, end)) != ST_OK) return s;
    if (c->rewind) return rewind_to(r);
  }
  if (r->val && c->snapshot_step != end) s = st__ps_chief_pull(c);
  return s;
}

/* The progress line, then the backup of the next epoch's start (the last
 * one is not written: the backup is deleted when done). */
static st_status src_after_end(void *user, st_model *m, st__fit_loop *fl, const st_epoch_logs *l) {
  st__ps_run *r = user;
  st__ps_chief *c = &r->c;
  const st_ps_train_options *a = r->a;
  if (!a->quiet && a->on_progress) {
    char line[512], val[96] = "";
    if (l->has_validation)
      snprintf(val, sizeof val, " - val_loss: %.4f - val_accuracy: %.4f", l->val_loss, l->val_accuracy);
    snprintf(line, sizeof line, "Epoch %d/%lld - %.1fs - loss: %.4f - accuracy: %.4f%s - closures: %lld (retried %lld)",
             l->epoch + 1, (long long)a->epochs, l->seconds, l->loss, l->accuracy, val, (long long)c->scheduled,
             (long long)c->retried);
    a->on_progress(a->message_user, line);
  }
  if (fl->pos.epoch >= a->epochs || m->stop_training) return ST_OK;
  double zero[4] = {0};
  st_status s = st__ps_chief_backup_or_recover(c, (int)fl->pos.epoch, 0, zero, NULL);
  return s == ST_OK && c->rewind ? rewind_to(r) : s;
}

static char *ps_report_json(st__ps_run *r, uint64_t (*st)[9], const st_history *h, bool *exact) {
  st__ps_chief *c = &r->c;
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  if (!f) return NULL;
  int64_t total = (int64_t)h->epochs * c->steps_per_epoch; /* fewer after EarlyStopping */
  fprintf(f, "{\"workers\": %d, \"ps\": %d, \"steps_per_execution\": %lld, \"steps_scheduled\": %lld, "
          "\"closures_scheduled\": %lld, \"closures_retried\": %lld, \"workers_lost\": %lld, \"workers_rejoined\": %lld, "
          "\"heartbeat_interval\": %g, \"max_staleness\": %lld, \"variable_shards\": %d, \"per_ps\": [", c->nw, c->nps, (long long)c->job.steps_per_execution,
          (long long)total, (long long)c->scheduled, (long long)c->retried, (long long)c->lost, (long long)c->rejoined,
          c->job.heartbeat_interval, (long long)c->job.max_staleness, c->layout.nvars);
  *exact = true;
  for (int p = 0; p < c->nps; p++) {
    double mean;
    memcpy(&mean, &st[p][4], 8);
    *exact &= st[p][0] == (uint64_t)total;
    fprintf(f, "%s{\"task\": \"ps:%d\", \"floats\": %zu, \"updates_applied\": %llu, \"duplicates_skipped\": %llu, "
            "\"pushes_refused\": %llu, \"frames_dropped\": %llu, \"staleness_mean\": %.4f, "
            "\"staleness_max\": %llu, \"connections_refused\": %llu, \"stale_pushes_recomputed\": %llu, "
            "\"updates_rolled_back\": %llu}",
            p ? ", " : "", p, c->layout.ps_floats[p],
            (unsigned long long)st[p][0], (unsigned long long)st[p][1], (unsigned long long)st[p][2],
            (unsigned long long)st[p][3], mean, (unsigned long long)st[p][5], (unsigned long long)st[p][6],
            (unsigned long long)st[p][7], (unsigned long long)st[p][8]);
  }
  /* examples trained on per epoch (completed closures only; a permutation
   * split in batches: n_train each when every example was visited once) */
  fprintf(f, "], \"train_examples_per_epoch\": [");
  for (int e = 0; e < h->epochs; e++) {
    fprintf(f, "%s%lld", e ? ", " : "", (long long)h->logs[e].examples);
    *exact &= h->logs[e].examples == c->n_train;
  }
  char why[512];
  st__ps_chief_log_refusals(c); /* those after the last heartbeat */
  int64_t dropped = st__ps_drops_text(st__ps_socket_counters(c->hb), why, sizeof why);
  if (dropped) st__ps_chief_say(c, "chief:0: %lld frames dropped (%s)", (long long)dropped, why);
  fprintf(f, "], \"chief_frames_dropped\": %lld, \"chief_connections_refused\": %lld", (long long)dropped,
          (long long)st__ps_transport_refused(c->t));
  fprintf(f, ", \"backups_written\": %lld, \"ps_lost\": %lld, \"rollbacks\": %lld, "
          "\"steps_rolled_back\": %lld, \"resumed_from_step\": %lld", (long long)c->backups,
          (long long)c->ps_lost, (long long)c->rollbacks, (long long)c->steps_rolled_back,
          (long long)r->resumed_step);
  fprintf(f, ", \"exactly_once\": %s}", *exact ? "true" : "false");
  fclose(f);
  return s;
}

static void fill_job(st__ps_chief *c, const st_ps_train_options *a) {
  st__ps_job *j = &c->job;
  j->job_id = st__ps_random_u64();
  snprintf(j->model, sizeof j->model, "%s", a->model);
  snprintf(j->data, sizeof j->data, "%s", a->data);
  j->seed = a->seed, j->batch = a->batch, j->train_examples = a->train_examples;
  j->val_split = a->val_split;
  j->steps_per_execution = a->steps_per_execution > 0 ? a->steps_per_execution : 1;
  j->heartbeat_interval = a->heartbeat_interval > 0 ? a->heartbeat_interval : 1.0;
  j->coordinator_timeout = a->coordinator_timeout > 0 ? a->coordinator_timeout : 60.0;
  j->opt = a->optimizer;
  j->max_staleness = a->max_staleness;
  j->ps_shards = a->ps_shards, j->ps_min_shard_bytes = a->ps_min_shard_bytes;
}

static void on_message(void *user, const char *line) {
  const st_ps_train_options *a = ((const st__ps_run *)user)->a;
  a->on_message(a->message_user, line);
}

static bool should_stop(void *user) {
  const st_ps_train_options *a = ((const st__ps_run *)user)->a;
  return a->should_stop(a->stop_user);
}

st_status st__ps_run_init(st__ps_run *r, const st_ps_train_options *a, const char *what) {
  memset(r, 0, sizeof *r);
  st__ps_chief *c = &r->c;
  r->a = a, r->resumed_step = -1;
  c->cfg = (st__ps_chief_config){a->keys_dir, a->insecure, a->backup_dir != NULL, r,
                                 a->on_message ? on_message : NULL, a->should_stop ? should_stop : NULL,
                                 backup_hook, reload_hook};
  c->snapshot_step = -1, c->ps_lost_in_wait = -1;
  c->n_train = a->n_train, r->val = a->validation;
  st_status s = st__ps_cluster_load(a->tf_config, a->cluster_file, a->task, "st_ps_train_options", &c->cluster);
  if (s != ST_OK) return s;
  if (c->cluster.self_role != ST_PS_CHIEF)
    return st_error(ST_ERR_INVALID, "task %s:%d: the %s runs on the chief; workers and ps run "
                    "st_ps_server_run ('strata server')", st__ps_role_name(c->cluster.self_role),
                    c->cluster.self_index, what);
  fill_job(c, a);
  c->incarnation = (uint32_t)st__ps_random_u64();
  return ST_OK;
}

st_status st__ps_run_model(st__ps_run *r) {
  st__ps_chief *c = &r->c;
  const st_ps_train_options *a = r->a;
  st_status s = st__ps_build_model(&c->job, &c->model);
  if (s == ST_OK && a->prepare) s = a->prepare(a->prepare_user, st__ps_model_of(&c->model), &r->val);
  if (s == ST_OK) s = st__ps_layout_make(c->model.net, c->cluster.count[ST_PS_PS], &c->job, &c->layout);
  c->steps_per_epoch = (c->n_train + a->batch - 1) / a->batch;
  c->job.total_steps = c->steps_per_epoch * a->epochs;
  if (s == ST_OK) s = st__ps_job_check(&c->job, "st_ps_train_options"); /* what the servers check */
  return s;
}

void st__ps_run_free(st__ps_run *r) {
  st__ps_chief_free(&r->c);
  free(r->pos.logs);
  free(r->fl.pos.logs);
  memset(r, 0, sizeof *r);
}

void st__ps_stats_fill(st_ps_stats *ps, const uint64_t *row) {
  ps->updates_applied = (int64_t)row[0], ps->duplicates_skipped = (int64_t)row[1];
  ps->pushes_refused = (int64_t)row[2], ps->frames_dropped = (int64_t)row[3];
  memcpy(&ps->staleness_mean, &row[4], 8);
  ps->staleness_max = (int64_t)row[5], ps->connections_refused = (int64_t)row[6];
  ps->stale_pushes_recomputed = (int64_t)row[7], ps->updates_rolled_back = (int64_t)row[8];
}

void st__ps_run_give_model(st__ps_run *r, st_ps_train_result *out) {
  st__ps_built *bt = r->c.model.owner;
  out->model = bt->model, out->strategy = bt->strategy;
  bt->model = NULL, bt->strategy = NULL;
  st__ps_model_free(&r->c.model);
}

/* The epochs: fit's loop (train/fit_loop.c) over the chief's closures. */
static st_status train_epochs(st__ps_run *r, st_history *h) {
  const st_ps_train_options *a = r->a;
  r->fo = st_fit_default_options();
  r->fo.epochs = (int)a->epochs, r->fo.callbacks = a->callbacks, r->fo.ncallbacks = a->ncallbacks;
  r->fo.validation = r->val;
  r->fl.o = &r->fo;
  double train0 = st_now_seconds();
  st_status s = start_backup(r);
  st__step_source src = {r, src_step, src_pass, src_before_end, src_after_end};
  if (s == ST_OK) s = st__fit_run_epochs(st__ps_model_of(&r->c.model), &r->fl, &src);
  r->fl.timed_seconds = st_now_seconds() - train0;
  for (int i = 0; i < r->fl.pos.nlogs; i++) r->fl.timed_samples += r->fl.pos.logs[i].examples;
  return s == ST_OK ? st__fit_copy_history(&r->fl, h) : s;
}

/* Everything after the cluster is known: train, then the counters and the
 * variables of every ps into the chief's model; out gets the results. */
static st_status train_job(st__ps_run *r, st_ps_train_result *out) {
  st__ps_chief *c = &r->c;
  const st_ps_train_options *a = r->a;
  st_status s = st__ps_run_model(r);
  c->perm = malloc((size_t)c->n_train * sizeof *c->perm);
  if (s == ST_OK && !c->perm) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) s = st__ps_chief_open(c);
  if (s == ST_OK && !a->quiet)
    st__ps_chief_say(c, "parameter_server job %016llx: %d workers, %d ps, %lld steps of %lld "
                     "examples (%s)", (unsigned long long)c->job.job_id, c->nw, c->nps,
                     (long long)c->job.total_steps, (long long)a->batch, a->insecure ? "insecure" : "CURVE");
  if (s == ST_OK) s = train_epochs(r, &out->history);
  uint64_t(*stats)[9] = calloc((size_t)c->nps + 1, sizeof *stats);
  if (s == ST_OK && !stats) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) s = st__ps_chief_gather_stats(c, stats);
  if (s == ST_OK) s = st__ps_chief_pull(c);
  bool exact = false;
  if (s == ST_OK && !(out->report_json = ps_report_json(r, stats, &out->history, &exact)))
    s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK && !(out->per_ps = calloc((size_t)c->nps + 1, sizeof *out->per_ps)))
    s = st_error(ST_ERR_NOMEM, "out of memory");
  for (int p = 0; s == ST_OK && p < c->nps; p++) st__ps_stats_fill(&out->per_ps[p], stats[p]);
  free(stats);
  if (s != ST_OK) return s;
  out->exactly_once = exact;
  out->workers = c->nw, out->nps = c->nps, out->steps_per_epoch = c->steps_per_epoch;
  st__ps_run_give_model(r, out);
  if (exact && a->backup_dir && !a->keep_backup) st__checkpoint_remove_all(a->backup_dir); /* as fit */
  return ST_OK;
}

st_ps_train_options st_ps_train_default_options(void) {
  st_ps_train_options o;
  memset(&o, 0, sizeof o);
  o.epochs = 1, o.batch = 32, o.steps_per_execution = 1;
  o.heartbeat_interval = 1.0, o.coordinator_timeout = 60.0, o.max_staleness = -1;
  o.optimizer = st_optimizer_default_options(ST_OPT_ADAM);
  return o;
}

void st_ps_train_result_free(st_ps_train_result *r) {
  if (!r) return;
  st_model_destroy(r->model);
  st_strategy_destroy(r->strategy);
  st_history_destroy(&r->history);
  free(r->per_ps);
  free(r->report_json);
  memset(r, 0, sizeof *r);
}

/* The numeric options' ranges (0 = the default where the field says so). */
static st_status check_ranges(const st_ps_train_options *o) {
  const char *f = "st_ps_train_options";
  if (!isfinite(o->heartbeat_interval) || o->heartbeat_interval < 0 || o->heartbeat_interval > 3600)
    return st_error(ST_ERR_INVALID, "%s.heartbeat_interval: %g (must be in (0, 3600] s; 0 = 1)", f,
                    o->heartbeat_interval);
  if (!isfinite(o->coordinator_timeout) || o->coordinator_timeout < 0 || o->coordinator_timeout > 1e6)
    return st_error(ST_ERR_INVALID, "%s.coordinator_timeout: %g (must be in (0, 1e6] s; 0 = 60)",
                    f, o->coordinator_timeout);
  const struct { const char *name; int64_t v; } counts[] = {
      {"steps_per_execution", o->steps_per_execution}, {"ps_shards", o->ps_shards},
      {"ps_min_shard_bytes", o->ps_min_shard_bytes}, {"backup_every", o->backup_every},
      {"train_examples", o->train_examples}, {"ncallbacks", o->ncallbacks}};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
    if (counts[i].v < 0)
      return st_error(ST_ERR_INVALID, "%s.%s: %lld is negative", f, counts[i].name,
                      (long long)counts[i].v);
  if (o->batch > INT32_MAX)
    return st_error(ST_ERR_INVALID, "%s.batch: %lld (at most %d)", f, (long long)o->batch, INT32_MAX);
  if (!(o->val_split >= 0.0 && o->val_split < 1.0))
    return st_error(ST_ERR_INVALID, "%s.val_split: %g (must be in [0, 1))", f, o->val_split);
  if ((unsigned)o->optimizer.kind >= ST_OPT_COUNT)
    return st_error(ST_ERR_INVALID, "%s.optimizer.kind: %d out of range", f, (int)o->optimizer.kind);
  st_status s = st_schedule_check(&o->optimizer.lr);
  return s == ST_OK ? s : st_error_prefix(s, "%s.optimizer.lr: ", f);
}

st_status st__ps_check_options(const st_ps_train_options *o) {
  if (!o->model || !o->model[0]) return st_error(ST_ERR_INVALID, "st_ps_train_options.model: not set");
  if (!o->data) return st_error(ST_ERR_INVALID, "st_ps_train_options.data: not set");
  if (o->n_train < 1 || o->n_train > UINT32_MAX)
    return st_error(ST_ERR_INVALID, "st_ps_train_options.n_train: %lld (must be 1..2^32-1)", (long long)o->n_train);
  if (o->epochs < 1) return st_error(ST_ERR_INVALID, "st_ps_train_options.epochs: %lld (must be >= 1)", (long long)o->epochs);
  if (o->batch < 1) return st_error(ST_ERR_INVALID, "st_ps_train_options.batch: %lld (must be >= 1)", (long long)o->batch);
  if (o->max_staleness < -1)
    return st_error(ST_ERR_INVALID, "st_ps_train_options.max_staleness: %lld (must be >= -1)", (long long)o->max_staleness);
  if (o->ncallbacks > 0 && !o->callbacks)
    return st_error(ST_ERR_INVALID, "st_ps_train_options.callbacks: NULL with ncallbacks %d", o->ncallbacks);
  return check_ranges(o);
}

st_status st_ps_train(const st_ps_train_options *a, st_ps_train_result *out) {
  if (!a) return st_error(ST_ERR_INVALID, "st_ps_train: o is NULL");
  ST_REQUIRE(out);
  memset(out, 0, sizeof *out);
  st_status s = st__ps_check_options(a);
  if (s != ST_OK) return s;
  st__ps_run r;
  s = st__ps_run_init(&r, a, "parameter_server job");
  if (s == ST_OK) s = train_job(&r, out);
  if (s != ST_OK) st_ps_train_result_free(out);
  if (r.c.cluster.self_role == ST_PS_CHIEF) st__ps_chief_stop_servers(&r.c);
  st__ps_run_free(&r);
  return s;
}
