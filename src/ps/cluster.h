/* Internal: the cluster of a parameter-server job, from TF_CONFIG (TensorFlow's
 * format) or from a cluster file plus a TYPE:INDEX task: TensorFlow's cluster
 * as distribute/cluster_spec.h parses and checks it (JSON, roles, addresses,
 * duplicates, the task), with this job's rules: exactly one chief, at least
 * one worker and one ps, no evaluator in the training cluster. Errors name
 * the source and the field, e.g.
 * "TF_CONFIG: cluster.worker[1]: duplicate address 127.0.0.1:2222 (also cluster.ps[0])".
 * Pure functions: any thread. */
#ifndef STRATA_PS_CLUSTER_H
#define STRATA_PS_CLUSTER_H

#include <stddef.h>

#include "distribute/cluster_spec.h"
#include "strata/base.h"
#include "strata/distribute.h"

/* The roles of a parameter-server job: the first three of st_task_role. */
typedef st_task_role st_ps_role;
#define ST_PS_CHIEF ST_TASK_CHIEF
#define ST_PS_WORKER ST_TASK_WORKER
#define ST_PS_PS ST_TASK_PS
#define ST_PS_ROLE_COUNT 3

#define ST_PS_MAX_TASKS ST_CLUSTER_MAX_TASKS /* per role (strata/distribute.h) */
#define ST_PS_MAX_HOST ST_CLUSTER_MAX_HOST

typedef st_cluster_task st_ps_task;
typedef st_cluster_spec st_ps_cluster;

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
