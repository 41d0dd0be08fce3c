/* BatchNormalization's moving statistics against batch statistics (issue 28:
 * resnet20's test accuracy trailing its training accuracy). Trains MODEL (a
 * built-in name or a Keras JSON, e.g. resnet20's with another momentum) on
 * Fashion-MNIST with Adam, batch BATCH, and after each epoch prints the test
 * accuracy with (a) the moving statistics (st_model_evaluate, what Keras's
 * evaluate does), (b) each test batch's own statistics (a training-mode
 * forward); at the end (c) with moving statistics recalibrated at the final
 * weights (RECAL training-mode forwards over training batches, default 500).
 * usage: bn_stats MODEL EPOCHS BATCH [TRAIN_EXAMPLES]
 * env: FMNIST (data dir; default the Debian dataset), THREADS (one_device's
 * compute threads; 0 = all cores), RECAL. docs/BENCHMARKS.md has a run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "nn/net.h"
#include "strata/strata.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int argmax(const float *p, int n) {
  int b = 0;
  for (int j = 1; j < n; j++)
    if (p[j] > p[b]) b = j;
  return b;
}

static double batch_stat_acc(st_model *m, const float *x, const uint8_t *y, int n, int bs,
                             bool training) {
  st_net *net = &m->net;
  st_replica *r = NULL;
  if (st__replica_create(net, net->be, 0, bs, net->params, net->state, &r)) {
    fprintf(stderr, "replica\n");
    exit(1);
  }
  size_t xs = st_shape_size(net->input_shape);
  int cols = (int)st__net_output_size(net);
  long ok = 0;
  for (int i = 0; i < n; i += bs) {
    int k = n - i < bs ? n - i : bs;
    const float *p = st__replica_forward(net, r, x + (size_t)i * xs, k, training, 0);
    for (int e = 0; e < k; e++) ok += argmax(p + (size_t)e * cols, cols) == y[i + e];
  }
  st__replica_destroy(r);
  return (double)ok / n;
}

int main(int argc, char **argv) {
  const char *model = argv[1];
  int epochs = atoi(argv[2]), bs = atoi(argv[3]);
  int ntrain = argc > 4 ? atoi(argv[4]) : 60000;
  const char *dir = getenv("FMNIST") ? getenv("FMNIST") : "/usr/share/datasets/fashion-mnist";
  st_mnist d;
  if (st_mnist_load(dir, &d)) {
    fprintf(stderr, "%s\n", st_last_error());
    return 1;
  }
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  so.threads = getenv("THREADS") ? atoi(getenv("THREADS")) : 0;
  st_strategy *sg = NULL;
  if (st_strategy_create(&so, &sg)) {
    fprintf(stderr, "%s\n", st_last_error());
    return 1;
  }
  mo.strategy = sg;
  st_model *m = NULL;
  st_status s = strstr(model, ".json") ? st_model_from_keras_json(model, &mo, &m)
                                       : st_builtin_model_create(model, &mo, &m);
  if (s) {
    fprintf(stderr, "%s\n", st_last_error());
    return 1;
  }
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  if (st_model_compile(m, &co)) {
    fprintf(stderr, "%s\n", st_last_error());
    return 1;
  }
  /* float copies of the data */
  int ntest = (int)d.test_x.dims[0];
  size_t px = 784;
  float *tx = malloc(sizeof(float) * px * ntest), *trx = malloc(sizeof(float) * px * ntrain);
  for (size_t i = 0; i < px * ntest; i++) tx[i] = ((uint8_t *)d.test_x.data)[i] / 255.0f;
  for (size_t i = 0; i < px * (size_t)ntrain; i++) trx[i] = ((uint8_t *)d.train_x.data)[i] / 255.0f;
  st_tensor X = {.dtype = ST_F32, .rank = 4, .dims = {ntrain, 28, 28, 1}, .data = trx};
  st_tensor Y = d.train_y;
  Y.dims[0] = ntrain;
  st_tensor TX = {.dtype = ST_F32, .rank = 4, .dims = {ntest, 28, 28, 1}, .data = tx};
  st_dataset *tr = NULL, *te = NULL;
  st_dataset_from_tensor_slices(&X, &Y, 1.0f, false, &tr);
  st_dataset_shuffle(tr, ntrain, 0, true, &tr);
  st_dataset_batch(tr, bs, false, &tr);
  st_dataset_from_tensor_slices(&TX, &d.test_y, 1.0f, false, &te);
  st_dataset_batch(te, 256, false, &te);
  for (int e = 0; e < epochs; e++) {
    st_fit_options fo = st_fit_default_options();
    st_history h;
    double t0 = now();
    if (st_model_fit(m, tr, &fo, &h)) {
      fprintf(stderr, "%s\n", st_last_error());
      return 1;
    }
    st_eval_result ev;
    st_model_evaluate(m, te, &ev);
    double bacc = batch_stat_acc(m, tx, d.test_y.data, ntest, bs, true);
    printf(
        "epoch %d: %.1fs train loss %.4f acc %.4f | test moving-stats loss %.4f acc %.4f | test "
        "batch-stats acc %.4f\n",
        e + 1, now() - t0, h.logs[0].loss, h.logs[0].accuracy, ev.loss, ev.accuracy, bacc);
    fflush(stdout);
    st_history_destroy(&h);
  }
  /* recalibrate: 500 training-mode forwards at fixed weights (momentum 0.99: 0.99^500 = 0.7%) */
  size_t ns = m->net.n_state;
  float *saved = malloc(ns * sizeof(float));
  memcpy(saved, m->net.state, ns * sizeof(float));
  st_net *net = &m->net;
  st_replica *r = NULL;
  st__replica_create(net, net->be, 0, bs, net->params, net->state, &r);
  int K = getenv("RECAL") ? atoi(getenv("RECAL")) : 500;
  for (int k = 0; k < K; k++) {
    int i = (k * bs) % (ntrain - bs);
    st__replica_forward(net, r, trx + (size_t)i * px, bs, true, 0);
  }
  st__replica_destroy(r);
  st_eval_result ev;
  st_model_evaluate(m, te, &ev);
  printf("recalibrated moving stats (%d train batches at final weights): test loss %.4f acc %.4f\n",
         K, ev.loss, ev.accuracy);
  double dm = 0, dv = 0; /* how far the moving stats were from the recalibrated ones */
  for (size_t i = 0; i < ns; i++) {
    double q = saved[i] - net->state[i];
    dm += q * q;
    dv += (double)net->state[i] * net->state[i];
  }
  printf("relative L2 distance moving vs recalibrated state: %.4f\n",
         dm > 0 ? __builtin_sqrt(dm / dv) : 0.0);
  return 0;
}
