/* Internal: the chief of a parameter-server job, as far as the cluster goes
 * (ps/chief.c: connections, JOB, heartbeats, lost and rejoining workers, the
 * counters and variables of every ps at the end; ps/chief_epoch.c: closures
 * handed out over an epoch's permutation, or one step at a time for the
 * coordinator API; ps/chief_recover.c: snapshots of every ps into the chief's
 * net, a lost ps waited for and every ps reloaded from a backup). What needs
 * the model, checkpoints, callbacks and history (the epoch loop, backups
 * written and read) is train/ps_train.c's, plugged in through the hooks of
 * st__ps_chief_config. The protocol is in docs/PARAMETER_SERVER.md. */
#ifndef STRATA_PS_CHIEF_H
#define STRATA_PS_CHIEF_H

#include "ps/job.h"

typedef struct st__ps_closure {
  int64_t first;  /* batch index in the epoch */
  int n;          /* steps */
  int state;      /* 0 queued, 1 running, 2 done */
  int worker;
} st__ps_closure;

typedef struct st__ps_wstate {
  st_ps_socket *sock;
  bool alive;
  int busy;         /* closure index or -1 */
  uint32_t incarnation; /* from its JOB_OK */
  double last_seen;
} st__ps_wstate;

typedef struct st__ps_chief_config {
  const char *keys_dir; /* CURVE keys (ignored when insecure) */
  bool insecure;
  bool recover;         /* BackupAndRestore (--backup-dir): a lost ps is waited for and
                           every ps reloads the latest backup; a closure a ps did not
                           answer is queued again */
  void *user;           /* for the hooks below */
  void (*on_message)(void *user, const char *line); /* NULL: st_log at ST_LOG_INFO */
  bool (*should_stop)(void *user);                  /* NULL: never */
  /* With recover: write a backup at a quiescent point of an epoch (closures
   * [0, k) of `epoch` done, with sums loss, examples, correct, metric
   * count); read the latest backup into the chief's net (*step: its global
   * step; the caller checks it is a closure boundary). */
  st_status (*backup)(void *user, int epoch, int k, const double *sums);
  st_status (*reload)(void *user, int64_t *step);
} st__ps_chief_config;

typedef struct st__ps_chief {
  st__ps_chief_config cfg;
  st_ps_cluster cluster;
  st_ps_transport *t;
  st_ps_socket *hb;          /* ROUTER at the chief's address */
  st_ps_socket **ps;         /* [nps] */
  double *ps_seen;           /* [nps] last heartbeat of each ps */
  st__ps_wstate *w;          /* [nw] */
  int nw, nps;
  st__ps_job job;
  uint32_t incarnation;
  int64_t n_train;
  st__ps_model model;        /* the job's model, as every task builds it */
  st__ps_layout layout;
  int64_t steps_per_epoch, scheduled, retried, lost, rejoined;
  char *job_text;            /* the JOB payload, kept to re-send to lost workers */
  uint32_t *perm;            /* [n_train] this epoch's order */
  double last_ping;
  /* BackupAndRestore */
  uint64_t generation;       /* bumped by every rollback to a backup (closure ids carry it) */
  bool rewind;               /* a ps was lost and every ps reloaded the backup: go to it */
  int64_t every_closures;    /* --backup-every in closures (0: epoch ends only) */
  int64_t ps_lost, rollbacks, steps_rolled_back, backups, done_since_backup;
  int64_t backup_step;       /* the global step of the latest backup */
  int ps_lost_in_wait;       /* the ps st__ps_chief_await saw lost (-1: none) */
  int64_t snapshot_step;     /* the chief's net holds every ps's state at this step (-1: not) */
  double *results;           /* coordinator API: [4 * total_steps] loss, examples, correct, metric count */
} st__ps_chief;

/* ---- ps/chief.c ---- */
/* One line to the caller (cfg.on_message, else st_log). */
void st__ps_chief_say(const st__ps_chief *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool st__ps_chief_stop_asked(const st__ps_chief *c);
st_status st__ps_chief_send(st__ps_chief *c, st_ps_socket *s, int type, uint64_t closure, const void *p,
                            size_t n);
/* Wait for a reply of `type` from task (role, index) on s (heartbeats go on
 * meanwhile); a ps lost meanwhile fails it at once (c->ps_lost_in_wait). */
st_status st__ps_chief_await(st__ps_chief *c, st_ps_socket *s, int type, int role, int index,
                             double timeout, st_ps_msg *m);
/* Connect to every task; JOB to every server, JOB_OK from each. */
st_status st__ps_chief_open(st__ps_chief *c);
/* Workers silent for 3 heartbeat intervals are lost (their closure in cls,
 * if any, queued again); heartbeats drained; the first lost ps or -1;
 * heartbeats sent. */
void st__ps_chief_check_workers(st__ps_chief *c, st__ps_closure *cls);
void st__ps_chief_drain_heartbeats(st__ps_chief *c);
int st__ps_chief_lost_ps(const st__ps_chief *c);
void st__ps_chief_ping(st__ps_chief *c);
/* Log the connections refused at the chief's port since the last call
 * (st__ps_transport_report_refusals; ping calls it). */
void st__ps_chief_log_refusals(st__ps_chief *c);
/* JOB_OK from lost worker i: a new process of the task rejoins. */
void st__ps_chief_rejoin(st__ps_chief *c, int i, const st_ps_msg *m);
/* DONE or ERROR from worker i (epoch's closure ids); sums += the closure's figures. */
st_status st__ps_chief_read_worker(st__ps_chief *c, int epoch, int i, st__ps_closure *cls, int *done,
                                   double *sums);
/* The id of closure k of an epoch in this generation. */
uint64_t st__ps_chief_closure_id(const st__ps_chief *c, int epoch, int k);
/* Per ps: applied, duplicates, refused, dropped, staleness mean (bits), max,
 * connections refused, stale pushes answered "recompute", rolled back. */
st_status st__ps_chief_gather_stats(st__ps_chief *c, uint64_t (*st)[9]);
/* The trained variables (and ps 0's state) of every ps into the net. */
st_status st__ps_chief_pull(st__ps_chief *c);
void st__ps_chief_stop_servers(st__ps_chief *c);
void st__ps_chief_free(st__ps_chief *c);

/* ---- ps/chief_recover.c ---- */
/* At a quiescent point (global step b): every ps's variables and slots into
 * the net, each checked to have applied exactly the steps before b. */
st_status st__ps_chief_snapshot(st__ps_chief *c, int64_t b);
/* The same; a ps lost meanwhile (after a first backup) is recovered. */
st_status st__ps_chief_snapshot_or_recover(st__ps_chief *c, int64_t b);
/* The net (a backup just read, at global step b) to every ps, a new
 * generation: pushes of closures handed out before are refused. */
st_status st__ps_chief_restore(st__ps_chief *c, int64_t b);
/* ps p is lost (with cfg.recover): wait for it, reload the latest backup
 * (cfg.reload) into every ps, set c->rewind. */
st_status st__ps_chief_recover(st__ps_chief *c, int p, st__ps_closure *cls);

/* ---- ps/chief_epoch.c ---- */
/* One epoch from closure k0 on: every closure done once; sums: loss,
 * examples, correct, metric count. With every_closures, cfg.backup at each
 * quiescent backup point. A lost ps (cfg.recover): c->rewind set. */
st_status st__ps_chief_run_epoch(st__ps_chief *c, int epoch, int k0, double *sums);
/* A backup at the point (cfg.backup); a ps lost while it is taken (after a
 * first backup) recovered as one lost while training. */
st_status st__ps_chief_backup_or_recover(st__ps_chief *c, int epoch, int k, const double *sums,
                                         st__ps_closure *cls);
/* The coordinator API: one round of queued closures cls[0, scheduled) to
 * free workers (RUN of one step each: idx[h * batch ...], count[h]
 * examples), replies, heartbeats, losses; *done += closures finished. */
st_status st__ps_chief_pump(st__ps_chief *c, st__ps_closure *cls, int64_t scheduled, const uint32_t *idx,
                            const int *count, int64_t *done, int wait_ms);

#endif
