/* The parameter-server C API (strata/ps.h): st_ps_train (the chief),
 * st_ps_server_run (a worker or ps task) and the coordinator API (a custom
 * loop gives st_ps_train's weight bytes), and BackupAndRestore with SNAPSHOT
 * and RESTORE in chunks. Bad clusters and options are
 * ST_ERR_INVALID naming the field, before any socket opens; a server with no
 * JOB stops on its stop callback or after job_timeout; and a whole cluster
 * as threads of this process on loopback (chief here, one worker and one ps
 * as threads, in-memory data) trains every step exactly once, its loss goes
 * down, and a second run gives the same weight bytes. The training cases skip
 * (77) without ZeroMQ. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "free_port.h"
#include "ps/test_hooks.h"
#include "ps/transport.h"
#include "model/model.h"
#include "strata/ps.h"

/* ThreadSanitizer: libzmq is not instrumented (tools/tsan_zmq.c says why);
 * nor is libpgm, which libzmq loads and initialises (a global flag) when the
 * first context of the process starts: with several tasks' transports in
 * one process, two threads start one each. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
  return "called_from_lib:libzmq.so\n"
         "called_from_lib:libsodium.so\n"
         "called_from_lib:libpgm-5.3.so.0\n"
         "race:libzmq.so\n"
         "race:libsodium.so\n"
         "race:libpgm-5.3.so.0\n";
}

/* Under ThreadSanitizer the cases that only repeat the threaded paths of
 * cluster_in_threads_trains_exactly_once with other payloads take ~17 s:
 * they skip there (the Release and ASan runs keep them). */
#if defined(__SANITIZE_THREAD__)
#define SKIP_UNDER_TSAN() \
  do { printf("skip under ThreadSanitizer: slow (~5 s), same threads as cluster_in_threads\n"); return; } while (0)
#else
#define SKIP_UNDER_TSAN() do {} while (0)
#endif

/* TF_CONFIG of a chief, one worker, one ps on ports[0..2], as task `type`. */
static void tf_config(char *buf, size_t n, const int *ports, const char *type) {
  snprintf(buf, n,
           "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"], \"ps\": "
           "[\"127.0.0.1:%d\"]}, \"task\": {\"type\": \"%s\", \"index\": 0}}",
           ports[0], ports[1], ports[2], type);
}

static void bad_cluster_is_invalid_naming_the_field(void) {
  const char *dup = "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"], "
                    "\"ps\": [\"127.0.0.1:2\"]}, \"task\": {\"type\": \"chief\"}}";
  st_ps_train_options o = st_ps_train_default_options();
  o.model = "mlp", o.data = "unused", o.n_train = 10, o.tf_config = dup;
  st_ps_train_result r;
  CHECK_EQ(st_ps_train(&o, &r), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "cluster.ps[0]: duplicate address 127.0.0.1:2") != NULL);
  CHECK(r.model == NULL);
  /* a chief that is not the chief */
  o.tf_config = "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"], "
                "\"ps\": [\"127.0.0.1:3\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}";
  CHECK_EQ(st_ps_train(&o, &r), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "task worker:0") != NULL);
  /* options named */
  o.n_train = 0;
  CHECK_EQ(st_ps_train(&o, &r), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "st_ps_train_options.n_train") != NULL);
  o.n_train = 10, o.cluster_file = "c.json", o.tf_config = NULL;
  CHECK_EQ(st_ps_train(&o, &r), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "cluster_file and task go together") != NULL);

  st_ps_server_options so = st_ps_server_default_options();
  so.tf_config = "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"], "
                 "\"ps\": [\"127.0.0.1:3\"]}, \"task\": {\"type\": \"worker\", \"index\": 3}}";
  CHECK_EQ(st_ps_server_run(&so), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "task.index: 3 out of range") != NULL);
  so.tf_config = "{\"cluster\": ";
  CHECK_EQ(st_ps_server_run(&so), ST_ERR_FORMAT);
  so.tf_config = dup; /* task chief */
  CHECK_EQ(st_ps_server_run(&so), ST_ERR_INVALID);
  so.job_timeout = 0;
  CHECK_EQ(st_ps_server_run(&so), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "job_timeout") != NULL);
}

static bool stop_now(void *user) { return atomic_load((atomic_int *)user) != 0; }
static void quiet_message(void *user, const char *line) { (void)user, (void)line; }

static void server_without_job_stops(void) {
  int ports[3] = {free_port(), free_port(), free_port()};
  char cfg[512];
  tf_config(cfg, sizeof cfg, ports, "ps");
  st_ps_server_options so = st_ps_server_default_options();
  so.tf_config = cfg, so.insecure = true, so.on_message = quiet_message;
  atomic_int stop = 1;
  so.should_stop = stop_now, so.stop_user = &stop;
  double t0 = st_now_seconds();
  CHECK_OK(st_ps_server_run(&so)); /* a stop request: ST_OK */
  so.should_stop = NULL, so.job_timeout = 0.3;
  CHECK_EQ(st_ps_server_run(&so), ST_ERR_PEER);
  CHECK(strstr(st_last_error(), "no JOB from the chief") != NULL);
  CHECK_LT(st_now_seconds() - t0, 5.0);
}

/* 512 examples, 28x28 u8; class k lights rows 2k..2k+2 (learnable). */
#define N_EX 512
typedef struct data {
  st_tensor x, y;
  uint8_t px[N_EX * 784], labels[N_EX];
} data;

static void make_data(data *d) {
  st_rng r = st_rng_make(11, 0);
  for (int i = 0; i < N_EX; i++) {
    int k = (int)st_rng_below(&r, 10);
    d->labels[i] = (uint8_t)k;
    for (int p = 0; p < 784; p++) {
      int row = p / 28;
      d->px[i * 784 + p] = (uint8_t)(row >= 2 * k && row < 2 * k + 3 ? 200 : st_rng_below(&r, 60));
    }
  }
  memset(&d->x, 0, sizeof d->x);
  memset(&d->y, 0, sizeof d->y);
  d->x.dtype = ST_U8, d->x.rank = 4, d->x.dims[0] = N_EX, d->x.dims[1] = 28, d->x.dims[2] = 28, d->x.dims[3] = 1;
  d->x.data = d->px;
  d->y.dtype = ST_U8, d->y.rank = 1, d->y.dims[0] = N_EX, d->y.data = d->labels;
}

static st_status give_data(void *user, const st_ps_data_request *r, const st_tensor **x, const st_tensor **y,
                           int64_t *n_train) {
  data *d = user;
  if (strcmp(r->spec, "in-memory") || r->batch != 64) return st_error(ST_ERR_INVALID, "unexpected request");
  *x = &d->x, *y = &d->y, *n_train = N_EX;
  return ST_OK;
}

typedef struct task {
  pthread_t th;
  char cfg[512];
  data *d; /* NULL: no data callback */
  st_status result;
  char error[512];
} task;

static void *server_main(void *arg) {
  task *t = arg;
  st_ps_server_options so = st_ps_server_default_options();
  so.tf_config = t->cfg, so.insecure = true, so.job_timeout = 30;
  so.data = t->d ? give_data : NULL, so.data_user = t->d, so.on_message = quiet_message;
  t->result = st_ps_server_run(&so);
  if (t->result != ST_OK) snprintf(t->error, sizeof t->error, "%s", st_last_error());
  return NULL;
}

/* A worker without its data callback: its JOB fails; the server returns
 * ST_ERR_PEER saying why, and the chief ST_ERR_INVALID naming the worker. */
static void worker_without_data_fails_named(void) {
  int ports[3] = {free_port(), free_port(), free_port()};
  task tasks[2];
  memset(tasks, 0, sizeof tasks);
  tf_config(tasks[0].cfg, sizeof tasks[0].cfg, ports, "worker");
  tf_config(tasks[1].cfg, sizeof tasks[1].cfg, ports, "ps");
  for (int i = 0; i < 2; i++) CHECK_EQ(pthread_create(&tasks[i].th, NULL, server_main, &tasks[i]), 0);
  char cfg[512];
  tf_config(cfg, sizeof cfg, ports, "chief");
  st_ps_train_options o = st_ps_train_default_options();
  o.tf_config = cfg, o.insecure = true, o.model = "mlp", o.data = "in-memory", o.n_train = N_EX;
  o.batch = 64, o.on_message = quiet_message, o.coordinator_timeout = 2;
  st_ps_train_result r;
  CHECK_EQ(st_ps_train(&o, &r), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "worker:0: st_ps_server_options.data: a worker task needs the training data") != NULL);
  for (int i = 0; i < 2; i++) pthread_join(tasks[i].th, NULL);
  CHECK_EQ(tasks[0].result, ST_ERR_PEER);
  CHECK(strstr(tasks[0].error, "worker:0: st_ps_server_options.data") != NULL);
  CHECK_OK(tasks[1].result); /* the ps got the chief's STOP */
}

/* The chief's order of epoch e (src/ps/chief_epoch.c permute): what a
 * custom loop schedules to train as st_ps_train does. */
static void permute(uint32_t *perm, int64_t n, uint64_t seed, int epoch) {
  for (int64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
  st_rng r = st_rng_make(seed, 0x5053u + (uint64_t)epoch);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)st_rng_below(&r, (uint64_t)i + 1);
    uint32_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
}

/* The coordinator API: both epochs' batches scheduled in the chief's order,
 * fetched, joined; errors of schedule named. */
static st_status custom_loop(const st_ps_train_options *o, st_ps_train_result *r) {
  st_ps_coordinator *k = NULL;
  st_status s = st_ps_coordinator_create(o, &k);
  CHECK_OK(s);
  if (s != ST_OK) return s;
  uint32_t perm[N_EX];
  int64_t h[16], nh = 0;
  for (int e = 0; e < 2; e++) {
    permute(perm, N_EX, (uint64_t)o->seed, e);
    for (int b = 0; b < N_EX / 64; b++) CHECK_OK(st_ps_coordinator_schedule(k, perm + 64 * b, 64, &h[nh++]));
  }
  CHECK_EQ(nh, 16);
  CHECK_EQ(h[15], 15);
  int64_t extra;
  CHECK_EQ(st_ps_coordinator_schedule(k, perm, 64, &extra), ST_ERR_INVALID); /* all 16 steps scheduled */
  CHECK(strstr(st_last_error(), "all scheduled") != NULL);
  st_ps_closure_result first, last;
  CHECK_OK(st_ps_coordinator_fetch(k, h[0], &first));
  CHECK_OK(st_ps_coordinator_join(k));
  CHECK_OK(st_ps_coordinator_fetch(k, h[15], &last));
  CHECK_EQ(first.examples, 64);
  CHECK_LT(last.loss, first.loss);
  CHECK_EQ(st_ps_coordinator_fetch(k, 16, &last), ST_ERR_INVALID);
  CHECK_EQ(st_ps_coordinator_closures_retried(k), 0);
  s = st_ps_coordinator_finish(k, r);
  CHECK_OK(s);
  st_ps_coordinator_destroy(k);
  return s;
}

static bool resumed; /* the last run_job with a backup resumed from step 12 */
static size_t n_state; /* the last run_job's model's state floats */
static bool decay_lr;  /* run_job: an exponential learning-rate schedule */

/* One job on a fresh cluster (st_ps_train, or the coordinator API when
 * custom); the trained weights into *w (malloc'd). */
static void run_job(data *d, const char *model, bool custom, const char *backup_dir, float **w, size_t *nw) {
  int ports[3] = {free_port(), free_port(), free_port()};
  task tasks[2];
  memset(tasks, 0, sizeof tasks);
  tf_config(tasks[0].cfg, sizeof tasks[0].cfg, ports, "worker");
  tf_config(tasks[1].cfg, sizeof tasks[1].cfg, ports, "ps");
  for (int i = 0; i < 2; i++) {
    tasks[i].d = d;
    CHECK_EQ(pthread_create(&tasks[i].th, NULL, server_main, &tasks[i]), 0);
  }
  char cfg[512];
  tf_config(cfg, sizeof cfg, ports, "chief");
  st_ps_train_options o = st_ps_train_default_options();
  o.tf_config = cfg, o.insecure = true, o.model = model, o.data = "in-memory", o.n_train = N_EX;
  o.epochs = 2, o.batch = 64, o.seed = 5, o.steps_per_execution = 2;
  o.optimizer.lr.initial = 0.01f;
  if (decay_lr) o.optimizer.lr = (st_schedule){ST_SCHEDULE_EXPONENTIAL, 0.01f, 4, 0.5f, false, 0.0f, 0, 0.0f};
  o.on_message = quiet_message;
  o.backup_dir = backup_dir, o.backup_every = 4, o.keep_backup = true;
  st_ps_train_result r;
  st_status s = custom ? custom_loop(&o, &r) : st_ps_train(&o, &r);
  CHECK_OK(s);
  for (int i = 0; i < 2; i++) {
    pthread_join(tasks[i].th, NULL);
    CHECK_OK(tasks[i].result); /* the chief's STOP */
  }
  *w = NULL, *nw = 0;
  if (s != ST_OK) return;
  CHECK(r.exactly_once);
  CHECK_EQ(r.nps, 1);
  CHECK_EQ(r.workers, 1);
  CHECK_EQ(r.steps_per_epoch, 8);
  CHECK_EQ(r.per_ps[0].updates_applied, 16);
  if (!custom) {
    CHECK_EQ(r.history.epochs, 2);
    CHECK_EQ(r.history.logs[0].examples, N_EX);
    CHECK_LT(r.history.logs[1].loss, r.history.logs[0].loss);
    for (int e = 0; e < 2 && !backup_dir; e++) /* the scheduled rate at the epoch's start, as fit */
      CHECK(r.history.logs[e].lr == st_schedule_lr(&o.optimizer.lr, (int64_t)e * 8));
    CHECK(strstr(r.report_json, "\"exactly_once\": true") != NULL);
  }
  if (backup_dir) resumed = strstr(r.report_json, "\"resumed_from_step\": 12") != NULL;
  /* the weights, then the state (BatchNormalization's moving statistics) */
  const st_net *net = &r.model->net;
  *nw = net->n_params + net->n_state;
  *w = malloc(*nw * sizeof(float));
  memcpy(*w, net->params, net->n_params * sizeof(float));
  if (net->n_state) memcpy(*w + net->n_params, net->state, net->n_state * sizeof(float));
  n_state = net->n_state;
  st_ps_train_result_free(&r);
  CHECK(r.model == NULL);
}

static void cluster_in_threads_trains_exactly_once(void) {
  data *d = malloc(sizeof *d);
  make_data(d);
  float *w1, *w2;
  size_t n1, n2;
  run_job(d, "mlp", false, NULL, &w1, &n1);
  run_job(d, "mlp", false, NULL, &w2, &n2);
  CHECK_GT(n1, 0);
  CHECK_EQ(n1, n2);
  if (n1 && n1 == n2) CHECK(memcmp(w1, w2, n1 * sizeof(float)) == 0); /* one worker: deterministic */
  free(w1), free(w2), free(d);
}

/* The history logs the learning rate the schedule gives at each epoch's
 * start (fit's epoch loop: 0.01, then 0.01 * 0.5^(8/4) after 8 steps), not
 * the initial one. */
static void history_logs_the_scheduled_rate(void) {
  data *d = malloc(sizeof *d);
  make_data(d);
  float *w;
  size_t n;
  decay_lr = true;
  run_job(d, "mlp", false, NULL, &w, &n);
  decay_lr = false;
  CHECK_GT(n, 0);
  free(w), free(d);
}

/* A custom loop scheduling st_ps_train's batches in its order trains the
 * same weight bytes (one worker: the same updates in the same order). */
static void coordinator_custom_loop_matches_st_ps_train(void) {
  SKIP_UNDER_TSAN();
  data *d = malloc(sizeof *d);
  make_data(d);
  float *w1, *w2;
  size_t n1, n2;
  run_job(d, "mlp", false, NULL, &w1, &n1);
  run_job(d, "mlp", true, NULL, &w2, &n2);
  CHECK_GT(n2, 0);
  CHECK_EQ(n1, n2);
  if (n1 && n1 == n2) CHECK(memcmp(w1, w2, n1 * sizeof(float)) == 0);
  free(w1), free(w2), free(d);
}

/* BackupAndRestore in chunks (issue 13 item 3): SNAPSHOT and RESTORE carry
 * a ps's variables and Adam slots in chunks (64 KiB here, through the
 * private test hook chunk_bytes, ps/test_hooks.h; 64 MiB otherwise, against the 256
 * MiB frame limit): the mlp's 235,146 variables and 2 Adam slots (2.8 MB)
 * on one ps take 43 of them. A job that
 * leaves its backup (step 12 of 16), then the same job again: it resumes
 * from the backup, every ps reloads it chunk by chunk, and it ends with the
 * weight bytes of the first. */
static void backup_restore_in_chunks(void) {
  SKIP_UNDER_TSAN();
  char dir[] = "/tmp/strata_ps_api_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  st__ps_set_test_hooks(&(st__ps_test_hooks){.chunk_bytes = 65536});
  data *d = malloc(sizeof *d);
  make_data(d);
  float *w1, *w2;
  size_t n1, n2;
  run_job(d, "mlp", false, dir, &w1, &n1);
  CHECK(!resumed);
  run_job(d, "mlp", false, dir, &w2, &n2);
  CHECK(resumed);
  CHECK_GT(n1, 0);
  CHECK_EQ(n1, n2);
  if (n1 && n1 == n2) CHECK(memcmp(w1, w2, n1 * sizeof(float)) == 0);
  st__ps_set_test_hooks(NULL);
  free(w1), free(w2), free(d);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_EQ(system(cmd), 0);
}

/* BatchNormalization (issue 13 item 4): the moving statistics live on ps 0;
 * each PUSH carries the step's change of them with the gradients and the ps
 * adds it once, under the same exactly-once record. A model with
 * BatchNormalization (tests/keras/mixed_keras3.json) trains exactly once,
 * its moving statistics left their initial values (zeros and ones: pushed
 * and applied), and a second run gives the same bytes, state included. */
static void batchnorm_statistics_on_the_ps(void) {
  SKIP_UNDER_TSAN();
  char path[1024];
  snprintf(path, sizeof path, "%s", __FILE__);
  char *slash = strrchr(path, '/');
  snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0), "keras/mixed_keras3.json");
  data *d = malloc(sizeof *d);
  make_data(d);
  float *w1, *w2;
  size_t n1, n2;
  run_job(d, path, false, NULL, &w1, &n1);
  size_t ns = n_state;
  run_job(d, path, false, NULL, &w2, &n2);
  CHECK_GT(ns, 0);
  CHECK_EQ(n1, n2);
  if (n1 && n1 == n2) CHECK(memcmp(w1, w2, n1 * sizeof(float)) == 0);
  size_t moved = 0;
  for (size_t i = 0; n1 && i < ns; i++) moved += w1[n1 - ns + i] != 0.0f && w1[n1 - ns + i] != 1.0f;
  CHECK_EQ(moved, ns);
  free(w1), free(w2), free(d);
}

static const check_case cases[] = {
    CHECK_CASE(bad_cluster_is_invalid_naming_the_field),
    CHECK_CASE(server_without_job_stops),
    CHECK_CASE(worker_without_data_fails_named),
    CHECK_CASE(cluster_in_threads_trains_exactly_once),
    CHECK_CASE(history_logs_the_scheduled_rate),
    CHECK_CASE(coordinator_custom_loop_matches_st_ps_train),
    CHECK_CASE(backup_restore_in_chunks),
    CHECK_CASE(batchnorm_statistics_on_the_ps),
};
int main(int argc, char **argv) {
  if (!st__ps_transport_built()) {
    printf("skip: Strata was built without ZeroMQ (libzmq3-dev): no parameter-server transport\n");
    return 77;
  }
  return CHECK_MAIN(argc, argv, cases);
}
