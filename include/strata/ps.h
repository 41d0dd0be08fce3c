/* Parameter-server training (ParameterServerStrategy, issue 13;
 * docs/PARAMETER_SERVER.md has the protocol and the failure bounds): the
 * entry point of a worker or ps task, as `strata server` runs it.
 *
 * A worker or ps task binds its cluster address, waits for the chief's JOB,
 * builds the job's model and then serves (a ps holds and updates its
 * variables, applying each global step at most once; a worker runs the
 * closures the chief hands it) until the chief sends STOP. The chief today is
 * `strata train --strategy parameter_server` or a program calling
 * st_ps_train (below): the chief hands out closures of steps, re-runs those
 * of lost workers, and gathers the variables at the end.
 *
 *   st_ps_server_options o = st_ps_server_default_options();
 *   o.cluster_file = "cluster.json", o.task = "worker:0", o.keys_dir = "keys";
 *   o.data = my_loader;   (workers: the training set the job names)
 *   st_status s = st_ps_server_run(&o);
 *
 * One server per thread; several servers (tasks of one cluster) may run as
 * threads of one process. */
#ifndef STRATA_PS_H
#define STRATA_PS_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/data.h"
#include "strata/train.h"

/* What a worker task must train on: the job's data as the chief sent it. */
typedef struct st_ps_data_request {
  const char *spec;       /* the job's data (the chief's --data) */
  double val_split;       /* the chief's validation split */
  int64_t train_examples; /* 0: all */
  int64_t batch;
  uint64_t seed;
  st_shape input;         /* the model's input shape */
} st_ps_data_request;

/* Gives a worker its training set: *x the images (ST_U8, scaled by 1/255, or
 * ST_F32; dims[0] = examples, the rest flattened to the model's input) and *y
 * the labels (ST_U8), both borrowed until st_ps_server_run returns; *n_train
 * how many of the first examples are the training split (the chief's). */
typedef st_status (*st_ps_data_fn)(void *user, const st_ps_data_request *r, const st_tensor **x,
                                   const st_tensor **y, int64_t *n_train);
/* One line of progress or diagnosis (no trailing newline). */
typedef void (*st_ps_message_fn)(void *user, const char *line);
/* Polled about every 0.2 s: true stops the server (ST_OK). */
typedef bool (*st_ps_stop_fn)(void *user);

typedef struct st_ps_server_options {
  /* The cluster and this task: tf_config (TF_CONFIG's JSON text) when set,
   * else cluster_file with task ("worker:0", "ps:1"), else the environment's
   * TF_CONFIG. The task must be a worker or a ps. */
  const char *tf_config;
  const char *cluster_file, *task;
  const char *keys_dir;     /* CURVE keys of `strata keygen` (ignored when insecure) */
  bool insecure;            /* no CURVE: trusted networks only */
  double job_timeout;       /* ST_ERR_PEER when no JOB came within this many seconds (120) */
  st_ps_data_fn data;       /* required for worker tasks */
  void *data_user;
  st_ps_message_fn on_message; /* NULL: st_log at ST_LOG_INFO */
  void *message_user;
  st_ps_stop_fn should_stop;   /* NULL: only STOP from the chief ends the server */
  void *stop_user;
} st_ps_server_options;

/* job_timeout 120 s, everything else empty (the environment's TF_CONFIG). */
st_ps_server_options st_ps_server_default_options(void);
/* Run a worker or ps task until the chief's STOP (ST_OK), a stop request
 * (ST_OK), or a failure: ST_ERR_INVALID for a bad cluster or task (naming the
 * field, as the CLI), ST_ERR_NOT_BUILT without ZeroMQ, ST_ERR_PEER when the
 * chief is silent past the job's coordinator timeout, no JOB came within
 * job_timeout, the job could not be set up, or the chief declared this worker
 * lost. Every line it reports goes to on_message first. */
st_status st_ps_server_run(const st_ps_server_options *o);

/* CURVE keys for every task of a cluster into dir (created if missing):
 * <role>-<index>.pub (Z85 public key) and <role>-<index>.secret (mode 0600),
 * what `strata keygen DIR` writes; give that dir as keys_dir to the servers
 * and the chief instead of insecure. The cluster: tf_config (TF_CONFIG's
 * JSON text) when set, else cluster_file, else the environment's TF_CONFIG
 * (tf_config and cluster_file may be NULL). ST_ERR_INVALID for a bad
 * cluster (naming the field) or a NULL dir; ST_ERR_IO naming the file;
 * ST_ERR_NOT_BUILT without ZeroMQ. */
st_status st_ps_keygen(const char *tf_config, const char *cluster_file, const char *dir);

/* A copy of tf_config (TF_CONFIG's JSON text, or a cluster file's) in which
 * every address with port 0 ("127.0.0.1:0") has a port that was free when
 * picked (bound, then released: another program may take it before the task
 * binds it, so pick just before starting the tasks, and give every task the
 * same text). For a local cluster without hand-picked ports. *out is
 * malloc'd (free()); NULL on failure. ST_ERR_FORMAT for text that is not a
 * JSON object (naming line and column); ST_ERR_IO when no port can be bound. */
st_status st_ps_cluster_pick_ports(const char *tf_config, char **out);

/* The chief of a parameter-server job (what `strata train --strategy
 * parameter_server` runs). The cluster fields are as st_ps_server_options's;
 * the task must be the chief. */
typedef struct st_ps_train_options {
  const char *tf_config, *cluster_file, *task, *keys_dir;
  bool insecure;
  /* The job every task builds: a built-in model name or a Keras JSON path
   * (every task reads it), the data the workers load (their
   * st_ps_server_options.data gets this spec), and how training goes. */
  const char *model, *data;
  int64_t n_train;            /* training examples (the workers' n_train) */
  const char *data_fingerprint; /* backup identity (st_fit_options); NULL: none */
  st_dataset *validation;     /* borrowed; evaluated at each epoch end; NULL: none */
  int64_t epochs, batch, seed, train_examples;
  double val_split;           /* sent to the workers' data request */
  st_optimizer_options optimizer; /* applied on the ps */
  int64_t steps_per_execution;    /* steps per closure (1) */
  double heartbeat_interval;      /* seconds (1); a task silent for 3 is lost */
  double coordinator_timeout;     /* seconds (60): servers exit when the chief is silent this
                                     long; the chief waits this long for each server's answer
                                     to the job (ST_ERR_PEER naming the task) */
  int64_t max_staleness;          /* -1: unbounded */
  int64_t ps_shards, ps_min_shard_bytes; /* variable partitioning (0: none) */
  const char *backup_dir;         /* BackupAndRestore (NULL: none; a lost ps then ends the job) */
  int64_t backup_every;           /* with backup_dir: also every N steps */
  bool resume_anyway;
  bool keep_backup;               /* false: the backup is deleted once the job ran exactly once (as fit) */
  const st_callback *callbacks;   /* epoch-level hooks, run by the chief */
  int ncallbacks;
  /* Called once the chief's model is built and compiled, before any JOB is
   * sent: may check the data against the model and replace *validation. */
  st_status (*prepare)(void *user, st_model *m, st_dataset **validation);
  void *prepare_user;
  st_ps_message_fn on_message;    /* diagnostics (NULL: st_log at ST_LOG_INFO) */
  st_ps_message_fn on_progress;   /* one line per epoch (NULL: none) */
  void *message_user;
  st_ps_stop_fn should_stop;      /* true: the job stops with ST_ERR_STOPPED */
  void *stop_user;
  bool quiet;                     /* no start, resume or epoch lines */
} st_ps_train_options;
/* Defaults: 1 epoch, batch 32, Adam, the values noted above. */
st_ps_train_options st_ps_train_default_options(void);

/* What one ps did (STATS at the end of the job). */
typedef struct st_ps_stats {
  int64_t updates_applied, duplicates_skipped, pushes_refused, frames_dropped;
  double staleness_mean;
  int64_t staleness_max, connections_refused, stale_pushes_recomputed, updates_rolled_back;
} st_ps_stats;

typedef struct st_ps_train_result {
  st_model *model;        /* owned: the job's model holding the trained variables */
  st_strategy *strategy;  /* owned: the model's (one device) */
  st_history history;     /* the epochs trained */
  int workers, nps;
  int64_t steps_per_epoch;
  st_ps_stats *per_ps;    /* owned [nps] */
  bool exactly_once;      /* every ps applied every step once; every epoch saw each example once */
  char *report_json;      /* owned: the "parameter_server" object of `strata train --report` */
} st_ps_train_result;

/* Run the job as the chief: JOB to every server, closures to the workers
 * until the epochs are done, then every ps's counters and variables into
 * out->model, and STOP to every server. ST_ERR_INVALID for a bad cluster,
 * task or option (naming the field); ST_ERR_PEER when a task is lost beyond
 * recovery; ST_ERR_STOPPED on a stop request. *out is filled on success
 * (freed with st_ps_train_result_free) and empty on failure. */
st_status st_ps_train(const st_ps_train_options *o, st_ps_train_result *out);
void st_ps_train_result_free(st_ps_train_result *r); /* accepts an emptied result */

/* A coordinator for custom loops, in the spirit of TensorFlow's
 * ClusterCoordinator: the chief side of a job whose closures the caller
 * schedules. A closure here is one training step (pull every ps's
 * variables, forward and backward on the batch, push each ps its part of the
 * gradients) over the training examples the caller names; a free worker
 * runs it. schedule returns at once with a handle (the closure's global
 * step, 0, 1, ...: a RemoteValue); join waits for every scheduled closure;
 * fetch waits for one and gives its result. The exactly-once record is
 * st_ps_train's: each ps applies each step at most once, a closure of a lost
 * worker runs again on another (the ps skip what they applied already), and
 * finish checks every ps applied every scheduled step once.
 *
 *   st_ps_coordinator *k;
 *   st_ps_coordinator_create(&o, &k);         (o as for st_ps_train)
 *   for (...) st_ps_coordinator_schedule(k, idx, n, &h[i]);
 *   st_ps_coordinator_join(k);
 *   st_ps_coordinator_fetch(k, h[0], &r);      (r.loss, r.accuracy)
 *   st_ps_coordinator_finish(k, &result);      (trained model, counters)
 *   st_ps_coordinator_destroy(k);
 *
 * o->epochs x ceil(n_train / batch) bounds the steps that may be scheduled;
 * steps_per_execution is 1; backup_dir and callbacks are refused
 * (ST_ERR_INVALID: st_ps_train has them). A failure of the job (a lost ps,
 * every worker lost, a stop request) is returned by the call that sees it
 * and by every later one. One thread at a time. */
typedef struct st_ps_coordinator st_ps_coordinator;
/* The result of one closure (its batch's mean loss and accuracy). */
typedef struct st_ps_closure_result {
  double loss, accuracy;
  int64_t examples, correct;
} st_ps_closure_result;
/* Connect to the cluster and send every server the job (as st_ps_train
 * does before its first closure). o, its strings and validation must stay
 * valid until st_ps_coordinator_destroy. */
st_status st_ps_coordinator_create(const st_ps_train_options *o, st_ps_coordinator **out);
/* Queue one training step over the examples idx[0..n) (1 <= n <= batch, each
 * below n_train); *handle names it for fetch. ST_ERR_INVALID once the job's
 * steps are all scheduled. */
st_status st_ps_coordinator_schedule(st_ps_coordinator *k, const uint32_t *idx, int64_t n, int64_t *handle);
/* Wait until every scheduled closure is done. */
st_status st_ps_coordinator_join(st_ps_coordinator *k);
/* Wait for closure `handle` and give its result. */
st_status st_ps_coordinator_fetch(st_ps_coordinator *k, int64_t handle, st_ps_closure_result *out);
/* Join, then every ps's counters and variables into *out (model, per_ps,
 * exactly_once: every ps applied each scheduled step once; no history or
 * report_json) and STOP to every server. Free *out with
 * st_ps_train_result_free. */
st_status st_ps_coordinator_finish(st_ps_coordinator *k, st_ps_train_result *out);
/* Closures run again because their worker was lost. */
int64_t st_ps_coordinator_closures_retried(const st_ps_coordinator *k);
/* Accepts NULL; sends STOP to every server when finish did not. */
void st_ps_coordinator_destroy(st_ps_coordinator *k);

#endif
