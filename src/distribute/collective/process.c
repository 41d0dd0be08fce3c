/* The processes of a multi-worker job, whichever way they were launched:
 * by an MPI launcher (mpirun, srun: the MPI transport), or the TensorFlow
 * way, one process per worker each with its TF_CONFIG (the Gloo transport),
 * or alone (a single worker). The choice is made once per process, at the
 * first st__process_world, and every process transport of the job is then
 * created, left and counted through here (collective.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distribute/cluster_spec.h"
#include "distribute/collective/collective.h"

typedef enum world_kind { WORLD_MPI = 0, WORLD_GLOO } world_kind;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static world_kind g_kind = WORLD_MPI;
static st_status g_status = ST_OK;
static char g_error[1024];
static int g_rank, g_size = 1, g_node_size = 1;

bool st__process_launched_by_mpi(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 1) return true;
  }
  return false;
}

/* multi_worker_mirrored's rules for a TF_CONFIG cluster: the chief (if any)
 * and the workers train; parameter servers belong to another strategy; an
 * evaluator may be listed (it runs as a job of its own). */
static const st_cluster_policy k_policy = {
    .min = {0, 0, 0, 0},
    .max = {1, ST_CLUSTER_MAX_TASKS, 0, 1},
    .why = {"at most one chief (it is worker 0 of the job)", "too many workers",
            "parameter servers belong to --strategy parameter_server, not "
            "multi_worker_mirrored", "at most one evaluator"},
    .roles = "chief, worker or evaluator",
};

st_status st__tf_config_job(const char *json, size_t len, st_tf_config_job *job) {
  memset(job, 0, sizeof *job);
  st_cluster_spec c;
  st_status s = st__cluster_spec_parse_tf_config(json, len, "TF_CONFIG", &k_policy, &c);
  if (s != ST_OK) return s;
  int chiefs = c.count[ST_TASK_CHIEF], n = chiefs + c.count[ST_TASK_WORKER];
  if (n == 0)
    s = st_error(ST_ERR_INVALID, "TF_CONFIG: cluster: no chief or worker to train");
  else if (c.self_role != ST_TASK_CHIEF && c.self_role != ST_TASK_WORKER)
    s = st_error(ST_ERR_INVALID, "TF_CONFIG: task.type: '%s' does not train under "
                 "multi_worker_mirrored (expected chief or worker)",
                 st__task_role_name(c.self_role));
  else if (n > ST_MAX_WORKERS)
    s = st_error(ST_ERR_INVALID, "TF_CONFIG: %d training tasks (chief and workers), at most %d "
                 "(ST_MAX_WORKERS)", n, ST_MAX_WORKERS);
  const st_cluster_task *me = s == ST_OK ? &c.tasks[c.self_role][c.self_index] : NULL;
  for (int r = 0; me && r < n; r++) { /* chief first, then the workers */
    const st_cluster_task *t = r < chiefs ? &c.tasks[ST_TASK_CHIEF][r]
                                          : &c.tasks[ST_TASK_WORKER][r - chiefs];
    snprintf(job->address[r], sizeof job->address[r], "%s:%d", t->host, t->port);
    job->node_size += strcmp(t->host, me->host) == 0; /* this host's tasks share its cores */
  }
  if (me) {
    job->rank = c.self_role == ST_TASK_CHIEF ? 0 : chiefs + c.self_index;
    job->size = n;
  }
  st__cluster_spec_free(&c);
  return s;
}

int st__tf_config_training_tasks(void) {
  const char *tf = getenv("TF_CONFIG");
  if (!tf || !*tf) return 0;
  st_cluster_spec c;
  if (st__cluster_spec_parse_tf_config(tf, strlen(tf), "TF_CONFIG", &k_policy, &c) != ST_OK) return 0;
  int n = c.count[ST_TASK_CHIEF] + c.count[ST_TASK_WORKER];
  st__cluster_spec_free(&c);
  return n;
}

static void init_once(void) {
  const char *tf = getenv("TF_CONFIG");
  st_tf_config_job *job = NULL;
  if (!st__process_launched_by_mpi() && tf && *tf) {
    if (!(job = malloc(sizeof *job))) g_status = st_error(ST_ERR_NOMEM, "TF_CONFIG: out of memory");
    else g_status = st__tf_config_job(tf, strlen(tf), job);
  }
  if (g_status == ST_OK && job && job->size > 1) {
    const char *addrs[ST_MAX_WORKERS];
    for (int r = 0; r < job->size; r++) addrs[r] = job->address[r];
    g_kind = WORLD_GLOO;
    g_rank = job->rank, g_size = job->size, g_node_size = job->node_size;
    g_status = st__gloo_world_join(g_rank, g_size, addrs);
  } else if (g_status == ST_OK) { /* mpirun, no TF_CONFIG, or one training task: MPI's world */
    g_kind = WORLD_MPI;
    if ((g_status = st__mpi_world(&g_rank, &g_size)) == ST_OK) g_node_size = st__mpi_node_size();
  }
  free(job);
  if (g_status != ST_OK) snprintf(g_error, sizeof g_error, "%s", st_last_error());
  if (g_node_size < 1) g_node_size = 1;
}

st_status st__process_world(int *rank, int *size) {
  pthread_once(&g_once, init_once);
  if (g_status != ST_OK) return st_error(g_status, "%s", g_error);
  *rank = g_rank;
  *size = g_size;
  return ST_OK;
}

int st__process_node_size(void) { return g_node_size; }

st_status st__collective_process_create(double timeout_s, const int64_t *step,
                                        st_collective **out) {
  return g_kind == WORLD_GLOO ? st__collective_gloo_create(timeout_s, step, out)
                              : st__collective_mpi_create(timeout_s, step, out);
}

void st__collective_process_leave(st_collective *c, const char *why) {
  if (g_kind == WORLD_MPI) st__collective_mpi_leave(c, why);
  else if (g_kind == WORLD_GLOO) st__collective_gloo_leave(c, why);
}
