/* A custom training loop: the mlp trained on Fashion-MNIST with
 * MirroredStrategy, writing the step by hand instead of calling fit — the C
 * analogue of TensorFlow's strategy.run(step_fn) with a replica context.
 * Usage: example_custom_loop [DIR] [EPOCHS] [REPLICAS]
 * (DIR defaults to the Debian dataset /usr/share/datasets/fashion-mnist). */
#include <stdio.h>
#include <stdlib.h>

#include "strata/strata.h"

typedef struct step_args {
  const st_batch *global;
  float loss[ST_MAX_REPLICAS], correct[ST_MAX_REPLICAS]; /* per replica */
} step_args;

/* Runs on every replica: its slice, its gradients, the synchronous update. */
static st_status train_step(st_replica_context *ctx, void *arg) {
  step_args *a = arg;
  st_batch local = st_replica_slice(ctx, a->global);
  double loss = 0;
  int64_t correct = 0;
  st_status s = st_replica_compute_gradients(ctx, &local, a->global->size, &loss, &correct);
  if (s != ST_OK) return s;
  a->loss[st_replica_id(ctx)] = (float)loss;
  a->correct[st_replica_id(ctx)] = (float)correct;
  return st_replica_apply_gradients(ctx); /* all-reduce + optimizer */
}

static int fail(const char *what) {
  fprintf(stderr, "custom_loop: %s: %s\n", what, st_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int epochs = argc > 2 ? atoi(argv[2]) : 1;
  st_mnist data;
  if (st_mnist_load(dir, &data) != ST_OK) return fail("loading data");
  data.train_x.rank = 4;
  data.train_x.dims[3] = 1;
  st_dataset *train = NULL;
  if (st_dataset_from_tensor_slices(&data.train_x, &data.train_y, 1.0f / 255, false, &train) ||
      st_dataset_shuffle(train, data.train_x.dims[0], 1, true, &train) ||
      st_dataset_batch(train, 128, false, &train))
    return fail("pipeline");

  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  so.replicas = argc > 3 ? atoi(argv[3]) : 0; /* 0: one replica per core */
  st_strategy *strategy = NULL;
  if (st_strategy_create(&so, &strategy)) return fail("strategy");
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  mo.strategy = strategy;
  st_model *model = NULL;
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  if (st_builtin_model_create("mlp", &mo, &model) || st_model_compile(model, &co))
    return fail("model");
  int replicas = st_strategy_num_replicas_in_sync(strategy);

  for (int e = 0; e < epochs; e++) {
    st_iterator *it = NULL;
    if (st_dataset_iterate(train, &it)) return fail("iterate");
    double loss = 0, correct = 0, seen = 0;
    for (;;) {
      st_batch b;
      bool end = false;
      if (st_iterator_next(it, &b, &end)) return fail("next batch");
      if (end) break;
      step_args a = {.global = &b};
      if (st_strategy_run(strategy, train_step, &a)) return fail("step");
      float sum[2], per[2 * ST_MAX_REPLICAS];
      for (int r = 0; r < replicas; r++) per[2 * r] = a.loss[r], per[2 * r + 1] = a.correct[r];
      st_strategy_reduce(strategy, ST_REDUCE_SUM, per, 2, sum);
      loss += sum[0], correct += sum[1], seen += b.size;
    }
    st_iterator_destroy(it);
    printf("epoch %d: %d replicas - loss: %.4f - accuracy: %.4f\n", e + 1, replicas,
           loss / seen, correct / seen);
  }
  st_model_destroy(model);
  st_strategy_destroy(strategy);
  st_dataset_destroy(train);
  st_mnist_destroy(&data);
  return 0;
}
