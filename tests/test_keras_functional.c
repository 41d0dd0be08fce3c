/* Keras functional JSON (tests/keras/functional_*.json, bad_functional_*):
 * Keras 2 and Keras 3 layouts of one graph with a shared layer import to the
 * same model, which trains to the bytes of the same graph built with the C
 * API; the summary shows what each layer reads; malformed graphs (a cycle,
 * an input the model was not given, an unknown layer or reference) are
 * refused naming the layer. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "model/model.h"
#include "strata/strata.h"

enum { N = 128, D = 8, C = 10 };
static float X[N * D], Y[N];
static char g_dir[1024];

static st_model *import(const char *file, st_status want) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", g_dir, file);
  st_model_options o = st_model_default_options(st_shape1(1));
  o.seed = 9;
  o.name = NULL; /* the file's */
  st_model *m = NULL;
  st_status s = st_model_from_keras_json(path, &o, &m);
  CHECK_MSG(s == want, "%s: %s (%s)", file, st_status_string(s), st_last_error());
  return m;
}

static void train(st_model *m) {
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(m, &co));
  st_dataset *ds = fixture_dataset(X, Y, N, D, 32);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 2;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
}

/* features -> tied -> tied -> logits, with the C API. */
static st_model *built(void) {
  st_node *x = NULL, *h1 = NULL, *h2 = NULL, *y = NULL;
  st_layer *tied = NULL, *logits = NULL;
  st_dense_options d = st_dense_default_options(D);
  d.activation = ST_ACT_TANH;
  d.name = "tied";
  CHECK_OK(st_dense_ex(d, &tied));
  st_dense_options e = st_dense_default_options(C);
  e.name = "logits";
  CHECK_OK(st_dense_ex(e, &logits));
  CHECK_OK(st_input(st_shape1(D), "features", &x));
  CHECK_OK(st_layer_call(tied, &x, 1, &h1));
  CHECK_OK(st_layer_call(tied, &h1, 1, &h2));
  CHECK_OK(st_layer_call(logits, &h2, 1, &y));
  st_model_options o = st_model_default_options(st_shape1(D));
  o.seed = 9;
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&x, 1, &y, 1, &o, &m));
  return m;
}

static void test_shared_import(void) {
  st_model *k2 = import("functional_shared_keras2.json", ST_OK);
  st_model *k3 = import("functional_shared_keras3.json", ST_OK);
  st_model *c = built();
  if (!k2 || !k3 || !c) return;
  CHECK(st_model_is_functional(k2) && st_model_is_functional(k3));
  CHECK_STREQ(k2->name, "shared");
  CHECK(k2->net.nnodes == 3 && k2->net.nlayers == 2 && k3->net.nnodes == 3);
  char *sum = NULL;
  CHECK_OK(st_model_summary(k3, &sum));
  CHECK_MSG(sum && strstr(sum, "Connected to") && strstr(sum, "features (InputLayer)") &&
                strstr(sum, "['features[0][0]', 'tied[0][0]']") && strstr(sum, "['tied[1][0]']"),
            "%s", sum ? sum : "");
  free(sum);
  train(k2), train(k3), train(c);
  CHECK(k2->net.n_params == c->net.n_params && k3->net.n_params == c->net.n_params);
  CHECK(memcmp(k2->net.params, c->net.params, c->net.n_params * sizeof(float)) == 0);
  CHECK(memcmp(k3->net.params, c->net.params, c->net.n_params * sizeof(float)) == 0);
  st_model_destroy(k2), st_model_destroy(k3), st_model_destroy(c);
}

static void refused(const char *file, const char *a, const char *b) {
  st_model *m = import(file, ST_ERR_FORMAT);
  CHECK(m == NULL);
  const char *e = st_last_error();
  CHECK_MSG(strstr(e, file) && strstr(e, a) && strstr(e, b), "%s: %s", file, e);
  st_model_destroy(m);
}

static void test_bad_graphs(void) {
  refused("bad_functional_cycle.json", "'a', Dense", "cycle");
  refused("bad_functional_disconnected.json", "disconnected", "'y'");
  refused("bad_functional_unknown.json", "'lstm'", "LSTM");
  refused("bad_functional_ref.json", "'a', Dense", "'nowhere'");
  refused("bad_functional_add_shapes.json", "'sum', Add", "(None, 5), input 0 (None, 4)");
  refused("bad_functional_concat_axis.json", "'cat', Concatenate", "other than the concat axis");
  refused("bad_functional_attention.json", "'mha', MultiHeadAttention", "same length");
}

static const check_case cases[] = {CHECK_CASE(test_shared_import), CHECK_CASE(test_bad_graphs)};

int main(int argc, char **argv) {
  const char *src = getenv("STRATA_SOURCE_DIR");
  snprintf(g_dir, sizeof g_dir, "%s/tests/keras", src ? src : ".");
  if (access(g_dir, R_OK) != 0) check_skip("tests/keras not found (set STRATA_SOURCE_DIR)");
  fixture_argmax_data(5, N, D, C, X, Y);
  return CHECK_MAIN(argc, argv, cases);
}
