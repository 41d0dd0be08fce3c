/* The built-in graph models (resnet20, mobilenet-tiny) on a few small
 * batches: their size (ResNet-20: 0.27M parameters), both input shapes, the
 * synchronous property on a real graph (mirrored x2 = one device with two
 * threads; pipeline 2 stages x 4 micro-batches = one device with 4 threads,
 * byte for byte), and the Keras 3 JSON round trip (exported, re-imported:
 * the same bytes after training). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/model.h"
#include "strata/strata.h"

enum { N = 32, H = 28, B = 16 };
static float X[N * 32 * 32 * 3], Y[N];

static bool g_sync;
static st_model *make(const char *name, st_shape in, st_strategy_options *so) {
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(so, &s));
  st_model_options o = st_model_default_options(in);
  o.seed = 2;
  o.sync_batchnorm = g_sync;
  o.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_builtin_model_create(name, &o, &m));
  if (!m) return NULL;
  m->owns_strategy = true;
  return m;
}

static void train(st_model *m, st_shape in) {
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = st_optimizer_default_options(ST_OPT_SGD);
  co.optimizer.lr = st_schedule_constant(0.05f);
  CHECK_OK(st_model_compile(m, &co));
  st_tensor x = {ST_F32, 4, {N, in.dims[0], in.dims[1], in.dims[2]}, X};
  st_tensor y = {ST_F32, 1, {N}, Y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &y, 1.0f, false, &ds));
  CHECK_OK(st_dataset_batch(ds, B, false, &ds));
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 1;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
}

static bool same(const st_model *a, const st_model *b) {
  return a && b && a->net.n_params == b->net.n_params &&
         memcmp(a->net.params, b->net.params, a->net.n_params * sizeof(float)) == 0 &&
         memcmp(a->net.state, b->net.state, a->net.n_state * sizeof(float)) == 0;
}

static void test_sizes(void) {
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  st_model *r = make("resnet20", st_shape3(H, H, 1), &so);
  st_model *r3 = make("resnet20", st_shape3(32, 32, 3), &so);
  st_model *mb = make("mobilenet-tiny", st_shape3(32, 32, 3), &so);
  CHECK_EQ(st_model_param_count(r, true), (size_t)272186);
  CHECK_EQ(st_model_param_count(r3, true), (size_t)272186 + 2 * 9 * 16);
  CHECK(st_model_output_shape(r3).dims[0] == 10 && st_model_output_shape(mb).dims[0] == 10);
  CHECK_STREQ(r->name, "resnet20");
  int adds = 0;
  for (int i = 0; i < st_model_layer_count(r); i++)
    adds += !strcmp(st_layer_class(st_model_layer(r, i)), "Add");
  CHECK_EQ(adds, 9);
  train(mb, st_shape3(32, 32, 3));
  st_model_destroy(r), st_model_destroy(r3), st_model_destroy(mb);
}

/* Largest |a - b| over the trainable variables, relative to max |a|. */
static double rel_diff(const st_model *a, const st_model *b) {
  double d = 0, mx = 1e-30;
  for (size_t i = 0; i < a->net.n_params; i++) {
    double x = a->net.params[i], y = b->net.params[i];
    d = fmax(d, fabs(x - y)), mx = fmax(mx, fabs(x));
  }
  return d / mx;
}

/* BatchNormalization's batch statistics are per replica by default (Keras):
 * mirrored x2 then normalises each half on its own, unlike one device. With
 * synchronized BN (the statistics all-reduced) it trains what one device
 * does, up to the rounding of the split sums. The pipeline normalises each
 * micro-batch on its own: with one micro-batch it trains what one device
 * does, with four what four mirrored replicas do (up to the rounding of
 * the threads' different splits of the convolutions' sums). */
static void test_resnet_strategies(void) {
  st_shape in = st_shape3(H, H, 1);
  st_strategy_options one = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  st_strategy_options mir = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  mir.replicas = 2;
  mir.threads = 1;
  g_sync = true;
  st_model *a = make("resnet20", in, &one), *b = make("resnet20", in, &mir);
  train(a, in), train(b, in);
  double d = a && b ? rel_diff(a, b) : 1;
  CHECK_MSG(d < 1e-5, "resnet20 with SyncBN: mirrored x2 differs from one device by %g", d);
  st_model_destroy(a), st_model_destroy(b);
  st_strategy_options pipe = st_strategy_default_options(ST_STRATEGY_PIPELINE);
  pipe.pipeline_stages = 2;
  pipe.micro_batches = 1;
  b = make("resnet20", in, &pipe); /* SyncBN: refused by the pipeline, naming the layer */
  st_compile_options co = st_compile_default_options();
  CHECK(b && st_model_compile(b, &co) == ST_ERR_INVALID &&
        strstr(st_last_error(), "synchronizes its batch statistics") &&
        strstr(st_last_error(), "BatchNormalization"));
  st_model_destroy(b);
  g_sync = false;
  a = make("resnet20", in, &one), b = make("resnet20", in, &pipe);
  train(a, in), train(b, in);
  d = a && b ? rel_diff(a, b) : 1;
  CHECK_MSG(d < 1e-5, "resnet20: the pipeline (1 micro-batch) differs from one device by %g", d);
  st_model_destroy(a), st_model_destroy(b);
  pipe.micro_batches = 4;
  mir.replicas = 4;
  a = make("resnet20", in, &mir), b = make("resnet20", in, &pipe);
  train(a, in), train(b, in);
  d = a && b ? rel_diff(a, b) : 1;
  CHECK_MSG(d < 1e-5, "resnet20: the pipeline (4 micro-batches) differs from mirrored x4 by %g", d);
  st_model_destroy(a), st_model_destroy(b);
}

static void test_keras3_round_trip(void) {
  st_shape in = st_shape3(H, H, 1);
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  st_model *a = make("resnet20", in, &so);
  char *json = NULL;
  CHECK_OK(st_model_to_keras_json(a, &json));
  CHECK(json && strstr(json, "\"Functional\"") && strstr(json, "keras_history"));
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options o = st_model_default_options(in);
  o.seed = 2;
  o.strategy = s;
  o.name = NULL;
  st_model *b = NULL;
  CHECK_OK(st_model_from_keras_json_text(json, json ? strlen(json) : 0, "resnet20.json", &o, &b));
  if (b) b->owns_strategy = true;
  if (b) {
    CHECK(b->net.nnodes == a->net.nnodes && b->net.nlayers == a->net.nlayers);
    char *again = NULL;
    CHECK_OK(st_model_to_keras_json(b, &again));
    CHECK_MSG(again && !strcmp(again, json), "the re-imported model exports other JSON");
    free(again);
    train(a, in), train(b, in);
    CHECK_MSG(same(a, b), "the re-imported resnet20 trains to other bytes");
  }
  free(json);
  st_model_destroy(a), st_model_destroy(b);
}

static const check_case cases[] = {CHECK_CASE(test_sizes), CHECK_CASE(test_resnet_strategies),
                                   CHECK_CASE(test_keras3_round_trip)};

int main(int argc, char **argv) {
  st_rng r = st_rng_make(77, 0);
  for (size_t i = 0; i < sizeof X / sizeof *X; i++) X[i] = st_rng_uniform(&r);
  for (int i = 0; i < N; i++) Y[i] = (float)(i % 10);
  return CHECK_MAIN(argc, argv, cases);
}
