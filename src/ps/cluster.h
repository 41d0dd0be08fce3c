/* Internal: the cluster of a parameter-server job, from TF_CONFIG (TensorFlow's
 * format) or from a cluster file plus a TYPE:INDEX task.
 *
 *   TF_CONFIG = {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]},
 *                "task": {"type": "worker", "index": 1}}
 *
 * Every check happens here, before any socket opens: valid JSON without
 * duplicate keys, only the roles chief (exactly one), worker (at least one)
 * and ps (at least one) ("evaluator" is refused in the training cluster),
 * each address "host:port" with a port in 1..65535 and a host of letters,
 * digits, '.', '-' or '_', no address twice, the task's type one of the roles
 * and its index in range. Errors are ST_ERR_INVALID (ST_ERR_FORMAT for bad
 * JSON) naming the source and the field, e.g.
 * "TF_CONFIG: cluster.worker[1]: duplicate address 127.0.0.1:2222 (also cluster.ps[0])".
 * Pure functions: any thread. */
#ifndef STRATA_DISTRIBUTE_PS_CLUSTER_H
#define STRATA_DISTRIBUTE_PS_CLUSTER_H

#include <stddef.h>

#include "strata/base.h"
#include "strata/distribute.h"

typedef enum st_ps_role { ST_PS_CHIEF = 0, ST_PS_WORKER, ST_PS_PS, ST_PS_ROLE_COUNT } st_ps_role;

#define ST_PS_MAX_TASKS ST_MAX_PS_TASKS /* per role (strata/distribute.h) */
#define ST_PS_MAX_HOST 253  /* DNS name limit */

typedef struct st_ps_task {
  st_ps_role role;
  int index;
  char host[ST_PS_MAX_HOST + 1];
  int port;
} st_ps_task;

typedef struct st_ps_cluster {
  int count[ST_PS_ROLE_COUNT];
  st_ps_task *tasks[ST_PS_ROLE_COUNT]; /* owned: [count[role]] */
  st_ps_role self_role;                /* this process's task */
  int self_index;
} st_ps_cluster;

/* "chief", "worker", "ps"; NULL for a bad role. */
const char *st__ps_role_name(st_ps_role r);
/* Parse a TF_CONFIG document (len bytes of json, not necessarily
 * NUL-terminated); source names it in errors ("TF_CONFIG"). On error *out is
 * left empty (st__ps_cluster_free not needed). */
st_status st__ps_cluster_parse_tf_config(const char *json, size_t len, const char *source,
                                         st_ps_cluster *out);
/* A cluster file (either {"cluster": {...}} or the bare role map) and a task
 * "TYPE:INDEX". */
st_status st__ps_cluster_parse_file(const char *path, const char *task, st_ps_cluster *out);
/* The TF_CONFIG environment variable (ST_ERR_INVALID when unset). */
st_status st__ps_cluster_from_env(st_ps_cluster *out);
/* The cluster and this task of a job's options: tf_config (TF_CONFIG's JSON
 * text) when set, else cluster_file with task, else the environment's
 * TF_CONFIG; what ("st_ps_train_options") names the options in errors. */
st_status st__ps_cluster_load(const char *tf_config, const char *cluster_file, const char *task,
                              const char *what, st_ps_cluster *out);
const st_ps_task *st__ps_cluster_task(const st_ps_cluster *c, st_ps_role r, int index);
/* Serialise as TF_CONFIG JSON with the given task; malloc'ed string, NULL on
 * allocation failure. */
char *st__ps_cluster_to_tf_config(const st_ps_cluster *c, st_ps_role r, int index);
void st__ps_cluster_free(st_ps_cluster *c); /* accepts an emptied cluster */

#endif
