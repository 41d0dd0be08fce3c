/* Internal: the server loop of a parameter-server job's worker and ps tasks
 * (ps/server.c), behind st_ps_server_run (strata/ps.h, train/ps_server.c,
 * which fills this configuration from its options). */
#ifndef STRATA_PS_SERVER_H
#define STRATA_PS_SERVER_H

#include "ps/job.h"

typedef struct st__ps_server_config {
  /* the cluster and this task (st__ps_cluster_load) */
  const char *tf_config, *cluster_file, *task;
  const char *keys_dir; /* CURVE keys (ignored when insecure) */
  bool insecure;
  double job_timeout;   /* ST_ERR_PEER when no JOB came within this many seconds */
  st__ps_build_fn build; /* the job's model */
  void *user;           /* for the three below */
  /* A worker's training set for the job (NULL: a worker task fails): as
   * st_ps_data_fn; input is the model's input shape. */
  st_status (*data)(void *user, const st__ps_job *j, st_shape input, const st_tensor **x,
                    const st_tensor **y, int64_t *n_train);
  void (*on_message)(void *user, const char *line); /* NULL: st_log at ST_LOG_INFO */
  bool (*should_stop)(void *user);                  /* NULL: only the chief's STOP */
} st__ps_server_config;

/* As st_ps_server_run. */
st_status st__ps_serve(const st__ps_server_config *cfg);

#endif
