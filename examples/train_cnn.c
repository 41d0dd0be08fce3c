/* Train the cnn on Fashion-MNIST through the public C API: the data pipeline
 * (from_tensor_slices -> shuffle -> batch), a Sequential model, compile, fit,
 * evaluate. Usage: example_train_cnn [DIR] [EPOCHS]
 * (DIR defaults to the Debian dataset /usr/share/datasets/fashion-mnist).
 * Switching strategy is one line: see `strategy` below. */
#include <stdio.h>
#include <stdlib.h>

#include "strata/strata.h"

static int fail(const char *what) {
  fprintf(stderr, "example: %s: %s\n", what, st_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int epochs = argc > 2 ? atoi(argv[2]) : 1;

  st_mnist data;
  if (st_mnist_load(dir, &data) != ST_OK) return fail("loading data");
  /* images u8 [n,28,28] -> [n,28,28,1]; pixels scaled to [0,1] per batch */
  data.train_x.rank = data.test_x.rank = 4;
  data.train_x.dims[3] = data.test_x.dims[3] = 1;
  st_dataset *train = NULL, *test = NULL;
  if (st_dataset_from_tensor_slices(&data.train_x, &data.train_y, 1.0f / 255, false, &train) ||
      st_dataset_shuffle(train, 60000, 42, true, &train) ||
      st_dataset_batch(train, 128, false, &train))
    return fail("train pipeline");
  if (st_dataset_from_tensor_slices(&data.test_x, &data.test_y, 1.0f / 255, false, &test) ||
      st_dataset_batch(test, 256, false, &test))
    return fail("test pipeline");

  /* The one line to change for another strategy: ST_STRATEGY_MIRRORED, ... */
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  st_strategy *strategy = NULL;
  if (st_strategy_create(&so, &strategy)) return fail("strategy");

  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  mo.seed = 42;
  mo.strategy = strategy;
  st_model *model = NULL;
  if (st_sequential_create(&mo, &model)) return fail("model");
  st_layer *l = NULL; /* each constructor's layer, owned by the model once added */
  if (st_conv2d(32, 3, ST_ACT_RELU, &l) || st_model_add(model, l) ||
      st_maxpool2d(2, &l) || st_model_add(model, l) ||
      st_conv2d(64, 3, ST_ACT_RELU, &l) || st_model_add(model, l) ||
      st_maxpool2d(2, &l) || st_model_add(model, l) ||
      st_flatten(&l) || st_model_add(model, l) ||
      st_dense(128, ST_ACT_RELU, &l) || st_model_add(model, l) ||
      st_dense(10, ST_ACT_LINEAR, &l) || st_model_add(model, l))
    return fail("building the model");

  char *summary = NULL;
  if (st_model_summary(model, &summary)) return fail("summary");
  printf("%s", summary);
  free(summary);

  st_compile_options co = st_compile_default_options(); /* Adam, sparse CE, accuracy */
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  if (st_model_compile(model, &co)) return fail("compile");

  st_callback cb;
  if (st_progress_create(stderr, false, epochs, &cb)) return fail("progress");
  st_fit_options fo = st_fit_default_options();
  fo.epochs = epochs;
  fo.callbacks = &cb;
  fo.ncallbacks = 1;
  st_history history;
  if (st_model_fit(model, train, &fo, &history)) return fail("fit");
  st_eval_result r;
  if (st_model_evaluate(model, test, &r)) return fail("evaluate");
  printf("test_loss: %.4f - test_accuracy: %.4f - samples/s: %.0f\n", r.loss, r.accuracy,
         history.samples_per_sec);

  st_history_destroy(&history);
  st_callback_destroy(&cb);
  st_model_destroy(model);
  st_strategy_destroy(strategy);
  st_dataset_destroy(train);
  st_dataset_destroy(test);
  st_mnist_destroy(&data);
  return 0;
}
