/* A parameter-server job through the C API (strata/ps.h): the chief
 * (st_ps_train) in the main thread, W workers and P ps (st_ps_server_run) as
 * threads of this process on loopback ports, the mlp on the first N
 * Fashion-MNIST training images. It trains what
 *   strata launch --workers W --ps P -- train --model mlp --train-examples N \
 *     --batch-size B --seed S --epochs E
 * trains (one worker: the same weight bytes) and saves them to OUT.
 * Usage: example_ps_cluster DIR W P N B S E OUT
 * (DIR: the Fashion-MNIST directory, e.g. /usr/share/datasets/fashion-mnist). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "strata/strata.h"

#define MAX_TASKS 16

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* TF_CONFIG of the cluster (ports: chief, workers, ps) as task type:index. */
static void tf_config(char *buf, size_t n, const int *ports, int w, int p, const char *type, int index) {
  size_t at = (size_t)snprintf(buf, n, "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"worker\": [", ports[0]);
  for (int i = 0; i < w; i++) at += (size_t)snprintf(buf + at, n - at, "%s\"127.0.0.1:%d\"", i ? ", " : "", ports[1 + i]);
  at += (size_t)snprintf(buf + at, n - at, "], \"ps\": [");
  for (int i = 0; i < p; i++) at += (size_t)snprintf(buf + at, n - at, "%s\"127.0.0.1:%d\"", i ? ", " : "", ports[1 + w + i]);
  snprintf(buf + at, n - at, "]}, \"task\": {\"type\": \"%s\", \"index\": %d}}", type, index);
}

typedef struct task {
  pthread_t th;
  char cfg[2048];
  const st_mnist *data;
  int64_t n_train;
  st_status result;
} task;

/* A worker's training set: the first n_train images of the directory. */
static st_status give_data(void *user, const st_ps_data_request *r, const st_tensor **x, const st_tensor **y,
                           int64_t *n_train) {
  (void)r;
  task *t = user;
  *x = &t->data->train_x, *y = &t->data->train_y, *n_train = t->n_train;
  return ST_OK;
}

static void *server_main(void *arg) {
  task *t = arg;
  st_ps_server_options o = st_ps_server_default_options();
  o.tf_config = t->cfg, o.insecure = true; /* loopback inside one process */
  o.data = give_data, o.data_user = t;
  t->result = st_ps_server_run(&o);
  return NULL;
}

static void print_line(void *user, const char *line) { (void)user, fprintf(stderr, "%s\n", line); }

int main(int argc, char **argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: %s DIR WORKERS PS N BATCH SEED EPOCHS OUT\n", argv[0]);
    return 2;
  }
  int w = atoi(argv[2]), p = atoi(argv[3]);
  if (w < 1 || p < 1 || w + p + 1 > MAX_TASKS) {
    fprintf(stderr, "ps_cluster: 1..%d tasks\n", MAX_TASKS - 1);
    return 2;
  }
  st_mnist data;
  if (st_mnist_load(argv[1], &data) != ST_OK) {
    fprintf(stderr, "ps_cluster: %s\n", st_last_error());
    return 2;
  }
  int64_t n = atoll(argv[4]);
  if (n < 1 || n > data.train_x.dims[0]) n = data.train_x.dims[0];
  int ports[MAX_TASKS];
  for (int i = 0; i < 1 + w + p; i++) ports[i] = free_port();
  task tasks[MAX_TASKS];
  memset(tasks, 0, sizeof tasks);
  for (int i = 0; i < w + p; i++) {
    tf_config(tasks[i].cfg, sizeof tasks[i].cfg, ports, w, p, i < w ? "worker" : "ps", i < w ? i : i - w);
    tasks[i].data = &data, tasks[i].n_train = n;
    pthread_create(&tasks[i].th, NULL, server_main, &tasks[i]);
  }
  char cfg[2048];
  tf_config(cfg, sizeof cfg, ports, w, p, "chief", 0);
  st_ps_train_options o = st_ps_train_default_options();
  o.tf_config = cfg, o.insecure = true;
  o.model = "mlp", o.data = argv[1], o.n_train = n;
  o.batch = atoll(argv[5]), o.seed = atoll(argv[6]), o.epochs = atoll(argv[7]);
  o.on_progress = print_line;
  st_ps_train_result r;
  st_status s = st_ps_train(&o, &r);
  if (s != ST_OK) fprintf(stderr, "ps_cluster: %s\n", st_last_error());
  for (int i = 0; i < w + p; i++) pthread_join(tasks[i].th, NULL);
  int rc = s == ST_OK ? 0 : 1;
  if (s == ST_OK) {
    printf("exactly_once: %s, ps:0 applied %lld updates\n", r.exactly_once ? "true" : "false",
           (long long)r.per_ps[0].updates_applied);
    if (st_model_save_weights(r.model, argv[8]) != ST_OK) {
      fprintf(stderr, "ps_cluster: %s\n", st_last_error());
      rc = 1;
    }
  }
  st_ps_train_result_free(&r);
  st_mnist_destroy(&data);
  return rc;
}
