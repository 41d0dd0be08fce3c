/* The cluster of a parameter-server job (cluster.h): TensorFlow's cluster
 * parser (distribute/cluster_spec.c) with this job's rules. */
#include "ps/cluster.h"

#include <stdlib.h>
#include <string.h>

static const st_cluster_policy k_policy = {
    .min = {1, 1, 1, 0},
    .max = {1, ST_PS_MAX_TASKS, ST_PS_MAX_TASKS, 0}, /* more than that: parse_role says so */
    .why = {"expected exactly one chief (the coordinator)",
            "no worker (a parameter-server job needs at least one)",
            "no ps (a parameter-server job needs at least one)",
            "an evaluator is not part of the training cluster (run it as a separate job)"},
    .roles = "chief, worker or ps",
};

const char *st__ps_role_name(st_ps_role r) {
  return (unsigned)r < ST_PS_ROLE_COUNT ? st__task_role_name(r) : NULL;
}

void st__ps_cluster_free(st_ps_cluster *c) { st__cluster_spec_free(c); }

st_status st__ps_cluster_parse_tf_config(const char *json, size_t len, const char *source,
                                         st_ps_cluster *out) {
  return st__cluster_spec_parse_tf_config(json, len, source, &k_policy, out);
}

st_status st__ps_cluster_parse_file(const char *path, const char *task, st_ps_cluster *out) {
  return st__cluster_spec_parse_file(path, task, &k_policy, out);
}

st_status st__ps_cluster_from_env(st_ps_cluster *out) {
  memset(out, 0, sizeof *out);
  const char *v = getenv("TF_CONFIG");
  if (!v || !*v)
    return st_error(ST_ERR_INVALID, "TF_CONFIG is not set (or give --cluster FILE --task TYPE:INDEX)");
  return st__ps_cluster_parse_tf_config(v, strlen(v), "TF_CONFIG", out);
}

st_status st__ps_cluster_load(const char *tf_config, const char *cluster_file, const char *task,
                              const char *what, st_ps_cluster *out) {
  memset(out, 0, sizeof *out);
  if (tf_config) return st__ps_cluster_parse_tf_config(tf_config, strlen(tf_config), "tf_config", out);
  if (cluster_file || task) {
    if (!cluster_file || !task)
      return st_error(ST_ERR_INVALID, "%s: cluster_file and task go together", what);
    return st__ps_cluster_parse_file(cluster_file, task, out);
  }
  return st__ps_cluster_from_env(out);
}

const st_ps_task *st__ps_cluster_task(const st_ps_cluster *c, st_ps_role r, int index) {
  return (unsigned)r < ST_PS_ROLE_COUNT ? st__cluster_spec_task(c, r, index) : NULL;
}

char *st__ps_cluster_to_tf_config(const st_ps_cluster *c, st_ps_role r, int index) {
  return st__cluster_spec_to_tf_config(c, r, index);
}
