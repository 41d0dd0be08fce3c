/* libFuzzer target: TF_CONFIG, both ways it is read. The input is a
 * TF_CONFIG document:
 *  - as a parameter-server cluster (st__ps_cluster_parse_tf_config,
 *    src/ps/cluster.c): a parsed cluster is checked for the promises of
 *    cluster.h (exactly one chief, a worker and a ps, ports in range, the task
 *    in range, no duplicate address) and serialised back and parsed again,
 *    which must give the same cluster;
 *  - as a multi_worker_mirrored job (st__tf_config_job,
 *    src/distribute/collective/process.c): a parsed job has its rank within
 *    its size (1..ST_MAX_WORKERS), every address "host:port" with a port in
 *    range, no address twice, and 1..size tasks on this task's host.
 * Traps (abort) on a broken promise. */
#include <stdio.h>

#include "distribute/collective/collective.h"
#include "ps/cluster.h"
#include "fuzz_common.h"

static void tf_config_check_(const st_ps_cluster *c) {
  if (c->count[ST_PS_CHIEF] != 1 || c->count[ST_PS_WORKER] < 1 || c->count[ST_PS_PS] < 1) abort();
  if (c->self_index < 0 || c->self_index >= c->count[c->self_role]) abort();
  for (int r = 0; r < ST_PS_ROLE_COUNT; r++)
    for (int i = 0; i < c->count[r]; i++) {
      const st_ps_task *t = &c->tasks[r][i];
      if (t->port < 1 || t->port > 65535 || !t->host[0] || t->index != i) abort();
      for (int r2 = 0; r2 < ST_PS_ROLE_COUNT; r2++)
        for (int j = 0; j < c->count[r2]; j++)
          if ((r2 != r || j != i) && c->tasks[r2][j].port == t->port &&
              !strcmp(c->tasks[r2][j].host, t->host))
            abort();
    }
}

static void tf_config_job_check_(const char *data, size_t size) {
  static st_tf_config_job job; /* large: not on the stack */
  if (st__tf_config_job(data, size, &job) != ST_OK) return;
  if (job.size < 1 || job.size > ST_MAX_WORKERS || job.rank < 0 || job.rank >= job.size ||
      job.node_size < 1 || job.node_size > job.size)
    abort();
  for (int r = 0; r < job.size; r++) {
    const char *colon = strrchr(job.address[r], ':');
    long port = colon ? strtol(colon + 1, NULL, 10) : 0;
    if (!colon || colon == job.address[r] || port < 1 || port > 65535) abort();
    for (int q = 0; q < r; q++)
      if (!strcmp(job.address[q], job.address[r])) abort();
  }
}

int st_fuzz_tf_config(const uint8_t *data, size_t size) {
  tf_config_job_check_((const char *)data, size);
  st_ps_cluster c;
  if (st__ps_cluster_parse_tf_config((const char *)data, size, "TF_CONFIG", &c) != ST_OK) return 0;
  tf_config_check_(&c);
  char *again = st__ps_cluster_to_tf_config(&c, c.self_role, c.self_index);
  if (!again) abort();
  st_ps_cluster d;
  if (st__ps_cluster_parse_tf_config(again, strlen(again), "TF_CONFIG", &d) != ST_OK) abort();
  for (int r = 0; r < ST_PS_ROLE_COUNT; r++)
    if (d.count[r] != c.count[r]) abort();
  if (d.self_role != c.self_role || d.self_index != c.self_index) abort();
  free(again);
  st__ps_cluster_free(&d);
  st__ps_cluster_free(&c);
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return st_fuzz_tf_config(data, size); }
#endif
