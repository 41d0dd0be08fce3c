/* libFuzzer target: the parameter-server JOB decoder (st__ps_job_decode,
 * src/ps/job.c) whose fields a worker sizes its buffers from (issue 29 D2:
 * batch = 2^62 + 1 was accepted and wrapped the worker's allocation). The
 * input is the JOB's text. An accepted job must keep every bound of
 * st__ps_job_check (batch in [1, 2^20], total_steps in [1, 2^32], finite
 * timings, coordinator_timeout >= 2 x heartbeat_interval, ...), and encoded
 * again it must decode to the same fields. Traps otherwise. */
#include "fuzz_common.h"
#include "ps/job.h"

int st_fuzz_ps_job(const uint8_t *data, size_t size) {
  if (size > (1u << 16)) return 0;
  st__ps_job j, k;
  if (st__ps_job_decode((const char *)data, size, &j) != ST_OK) return 0;
  if (st__ps_job_check(&j, "fuzz") != ST_OK) abort();
  if (j.batch < 1 || j.batch > ST_PS_MAX_BATCH || j.total_steps < 1 || j.total_steps > ST_PS_MAX_STEPS ||
      j.steps_per_execution < 1 || !(j.heartbeat_interval >= 0.01 && j.heartbeat_interval <= 3600) ||
      !(j.coordinator_timeout >= 2 * j.heartbeat_interval) || !(j.val_split >= 0 && j.val_split <= 0.99))
    abort();
  char *text = st__ps_job_encode(&j);
  if (!text) return 0; /* out of memory */
  st_status s = st__ps_job_decode(text, strlen(text), &k);
  free(text);
  if (s != ST_OK || k.batch != j.batch || k.total_steps != j.total_steps || k.seed != j.seed ||
      k.train_examples != j.train_examples || k.steps_per_execution != j.steps_per_execution ||
      k.heartbeat_interval != j.heartbeat_interval || k.coordinator_timeout != j.coordinator_timeout ||
      strcmp(k.model, j.model) || strcmp(k.data, j.data))
    abort();
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return st_fuzz_ps_job(data, size); }
#endif
