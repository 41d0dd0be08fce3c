/* Parameter-server training (ParameterServerStrategy, issue 13;
 * docs/PARAMETER_SERVER.md has the protocol and the failure bounds): the
 * entry point of a worker or ps task, as `strata server` runs it.
 *
 * A worker or ps task binds its cluster address, waits for the chief's JOB,
 * builds the job's model and then serves (a ps holds and updates its
 * variables, applying each global step at most once; a worker runs the
 * closures the chief hands it) until the chief sends STOP. The chief today is
 * `strata train --strategy parameter_server` (the coordinator is not yet in
 * the library).
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

st_ps_server_options st_ps_server_default_options(void);
/* Run a worker or ps task until the chief's STOP (ST_OK), a stop request
 * (ST_OK), or a failure: ST_ERR_INVALID for a bad cluster or task (naming the
 * field, as the CLI), ST_ERR_NOT_BUILT without ZeroMQ, ST_ERR_PEER when the
 * chief is silent past the job's coordinator timeout, no JOB came within
 * job_timeout, the job could not be set up, or the chief declared this worker
 * lost. Every line it reports goes to on_message first. */
st_status st_ps_server_run(const st_ps_server_options *o);

#endif
