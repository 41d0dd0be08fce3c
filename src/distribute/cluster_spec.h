/* Internal: a cluster as TensorFlow describes it, from TF_CONFIG or from a
 * cluster file plus a TYPE:INDEX task:
 *
 *   TF_CONFIG = {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]},
 *                "task": {"type": "worker", "index": 1}}
 *
 * Every check happens here, before any socket opens: valid JSON without
 * duplicate keys, only the roles chief, worker, ps and evaluator, each
 * address "host:port" with a port in 1..65535 and a host of letters, digits,
 * '.', '-' or '_', no address twice, the task's type one of the roles and its
 * index in range; then the job's own rules (st_cluster_policy: how many tasks
 * of each role it takes, and why). Errors are ST_ERR_INVALID (ST_ERR_FORMAT
 * for bad JSON) naming the source and the field, e.g.
 * "TF_CONFIG: cluster.worker[1]: duplicate address 127.0.0.1:2222 (also cluster.ps[0])".
 * Used by multi_worker_mirrored launched from TF_CONFIG (collective/process.c)
 * and by the parameter-server job. Pure functions: any thread. */
#ifndef STRATA_DISTRIBUTE_CLUSTER_SPEC_H
#define STRATA_DISTRIBUTE_CLUSTER_SPEC_H

#include <stddef.h>

#include "strata/base.h"
#include "strata/distribute.h"

typedef enum st_task_role {
  ST_TASK_CHIEF = 0,
  ST_TASK_WORKER,
  ST_TASK_PS,
  ST_TASK_EVALUATOR,
  ST_TASK_ROLE_COUNT
} st_task_role;

#define ST_CLUSTER_MAX_TASKS ST_MAX_PS_TASKS /* per role (strata/distribute.h) */
#define ST_CLUSTER_MAX_HOST 253  /* DNS name limit */

typedef struct st_cluster_task {
  st_task_role role;
  int index;
  char host[ST_CLUSTER_MAX_HOST + 1];
  int port;
} st_cluster_task;

typedef struct st_cluster_spec {
  int count[ST_TASK_ROLE_COUNT];
  st_cluster_task *tasks[ST_TASK_ROLE_COUNT]; /* owned: [count[role]] */
  st_task_role self_role;                     /* this process's task */
  int self_index;
} st_cluster_spec;

/* A job's rules: role r takes min[r]..max[r] tasks; when a count is out of
 * range the error says "cluster.<role>: <why[r]>" (with the count). A role
 * of max 0 is not the job's: a task of that type is an unknown role, and
 * roles lists the job's ("chief, worker or ps") for that message. */
typedef struct st_cluster_policy {
  int min[ST_TASK_ROLE_COUNT], max[ST_TASK_ROLE_COUNT];
  const char *why[ST_TASK_ROLE_COUNT];
  const char *roles;
} st_cluster_policy;

/* "chief", "worker", "ps", "evaluator"; NULL for a bad role. */
const char *st__task_role_name(st_task_role r);
/* Parse a TF_CONFIG document (len bytes of json, not necessarily
 * NUL-terminated); source names it in errors ("TF_CONFIG"). On error *out is
 * left empty (st__cluster_spec_free not needed). */
st_status st__cluster_spec_parse_tf_config(const char *json, size_t len, const char *source,
                                           const st_cluster_policy *p, st_cluster_spec *out);
/* A cluster file (either {"cluster": {...}} or the bare role map) and a task
 * "TYPE:INDEX". */
st_status st__cluster_spec_parse_file(const char *path, const char *task,
                                      const st_cluster_policy *p, st_cluster_spec *out);
const st_cluster_task *st__cluster_spec_task(const st_cluster_spec *c, st_task_role r, int index);
/* Serialise as TF_CONFIG JSON with the given task; malloc'ed string, NULL on
 * allocation failure. */
char *st__cluster_spec_to_tf_config(const st_cluster_spec *c, st_task_role r, int index);
void st__cluster_spec_free(st_cluster_spec *c); /* accepts an emptied spec */

#endif
