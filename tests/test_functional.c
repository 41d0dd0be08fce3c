/* Functional models (st_input, st_layer_call, st_functional_create): a chain
 * built as a graph trains the bytes of the same Sequential model; a layer
 * called twice shares its weights and gets the sum of both calls' gradients
 * (checked against finite differences of the model's loss); graphs with
 * several readers of a tensor and several inputs; mirrored x2 = one device;
 * and the errors a malformed graph gets. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixtures.h"
#include "model/model.h"
#include "strata/strata.h"

enum { N = 192, D = 8, C = 10 };
static float X[N * D], Y[N];

static st_layer *dense(int units, st_activation a) {
  st_layer *l = NULL;
  CHECK_OK(st_dense(units, a, &l));
  return l;
}
static st_node *call1(st_layer *l, st_node *in) {
  st_node *out = NULL;
  CHECK_OK(st_layer_call(l, &in, 1, &out));
  return out;
}


static void compile(st_model *m) {
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer.lr = st_schedule_constant(0.05f);
  CHECK_OK(st_model_compile(m, &co));
}

static void fit(st_model *m, int epochs) {
  st_dataset *ds = fixture_dataset(X, Y, N, D, 32);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = epochs;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
}

/* Input -> Dense 16 relu -> Dense 10, as a graph. */
static st_model *chain_graph(st_strategy *s) {
  st_node *x = NULL;
  CHECK_OK(st_input(st_shape1(D), NULL, &x));
  st_node *y = call1(dense(C, ST_ACT_LINEAR), call1(dense(16, ST_ACT_RELU), x));
  st_model_options o = st_model_default_options(st_shape1(D));
  o.seed = 3;
  o.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&x, 1, &y, 1, &o, &m));
  return m;
}

static void test_chain_equals_sequential(void) {
  st_model_options o = st_model_default_options(st_shape1(D));
  o.seed = 3;
  st_model *seq = NULL;
  CHECK_OK(st_sequential_create(&o, &seq));
  CHECK_OK(st_model_add(seq, dense(16, ST_ACT_RELU)));
  CHECK_OK(st_model_add(seq, dense(C, ST_ACT_LINEAR)));
  st_model *g = chain_graph(NULL);
  CHECK(st_model_is_functional(g) && !st_model_is_functional(seq));
  CHECK_STREQ(st_layer_name(st_model_layer(g, 1)), "dense_1");
  compile(seq), compile(g);
  fit(seq, 2), fit(g, 2);
  CHECK(g->net.n_params == seq->net.n_params);
  CHECK(memcmp(g->net.params, seq->net.params, seq->net.n_params * sizeof(float)) == 0);
  st_model_destroy(seq);
  st_model_destroy(g);
}

/* The model's loss summed over the batch (x [n, D], y [n]) on a replica of
 * its own, and its analytic gradient; then central differences of every
 * trainable variable. The net must be compiled (variables exist). */
static void model_gradcheck_x(st_model *m, const char *label, const float *x) {
  st_net *net = &m->net;
  int n = 6;
  st_replica *r = NULL;
  CHECK_OK(st__replica_create(net, net->be, 0, n, net->params, net->state, &r));
  if (!r) return;
  st__replica_forward(net, r, x, n, true, 0);
  st__replica_loss_backward(net, r, x, Y, n, 1, 0, NULL, NULL);
  float *g = malloc(net->n_params * sizeof *g);
  memcpy(g, r->grads, net->n_params * sizeof *g);
  double worst = 0.0;
  size_t wi = 0;
  for (size_t i = 0; i < net->n_params; i++) {
    float orig = net->params[i], eps = 1e-2f;
    net->params[i] = orig + eps;
    st__replica_forward(net, r, x, n, true, 0);
    double lp = st__replica_loss(net, r, Y, n);
    net->params[i] = orig - eps;
    st__replica_forward(net, r, x, n, true, 0);
    double lm = st__replica_loss(net, r, Y, n);
    net->params[i] = orig;
    double num = (lp - lm) / (2.0 * eps), err = fabs(num - g[i]) / fmax(1.0, fabs(num));
    if (err > worst) worst = err, wi = i;
  }
  CHECK_MSG(worst < 2e-2, "%s: gradient of variable float %zu: analytic %g, error %g", label,
            wi, (double)g[wi], worst);
  free(g);
  st__replica_destroy(r);
}
static void model_gradcheck(st_model *m, const char *label) { model_gradcheck_x(m, label, X); }

/* x -> d1 -> d1 (the same layer again) -> Dense 10: one kernel, two calls. */
static void test_shared_layer(void) {
  st_node *x = NULL;
  CHECK_OK(st_input(st_shape1(D), "features", &x));
  st_layer *shared = dense(D, ST_ACT_TANH);
  st_node *h = call1(shared, call1(shared, x));
  st_node *y = call1(dense(C, ST_ACT_LINEAR), h);
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&x, 1, &y, 1, NULL, &m));
  CHECK(st_model_layer_count(m) == 2);
  CHECK(m->net.nnodes == 3);
  CHECK(st_model_param_count(m, true) == (size_t)(D * D + D + D * C + C));
  compile(m);
  model_gradcheck(m, "shared Dense");
  st_model_destroy(m);
}


static st_node *call2(st_layer *l, st_node *a, st_node *b) {
  st_node *in[2] = {a, b}, *out = NULL;
  CHECK_OK(st_layer_call(l, in, 2, &out));
  return out;
}
static st_layer *made(st_status s, st_layer **l) {
  CHECK_OK(s);
  return *l;
}

/* x -> h = Dense 8 tanh; r = Dense 8 tanh (h); s = Add(h, r) (h read twice);
 * Concatenate(s, h) -> Dense 10. */
static st_model *residual(st_strategy *st) {
  st_layer *l = NULL;
  st_node *x = NULL;
  CHECK_OK(st_input(st_shape1(D), NULL, &x));
  st_node *h = call1(dense(D, ST_ACT_TANH), x);
  st_node *r = call1(dense(D, ST_ACT_TANH), h);
  st_node *s = call2(made(st_add(&l), &l), h, r);
  st_node *c = call2(made(st_concatenate(-1, &l), &l), s, h);
  st_node *y = call1(dense(C, ST_ACT_LINEAR), c);
  st_model_options o = st_model_default_options(st_shape1(D));
  o.seed = 4;
  o.strategy = st;
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&x, 1, &y, 1, &o, &m));
  return m;
}

static void test_residual(void) {
  st_model *m = residual(NULL);
  if (!m) return;
  CHECK(m->net.nnodes == 5 && !st__net_is_chain(&m->net));
  compile(m);
  model_gradcheck(m, "residual");
  char *sum = NULL;
  CHECK_OK(st_model_summary(m, &sum));
  CHECK_MSG(sum && strstr(sum, "['add[0][0]', 'dense[0][0]']"), "%s", sum ? sum : "");
  free(sum);
  st_model_destroy(m);
}

/* Two inputs (5 and 3 features of each row): Dense on each, Multiply, Dense. */
static void test_two_inputs(void) {
  st_layer *l = NULL;
  st_node *a = NULL, *b = NULL;
  CHECK_OK(st_input(st_shape1(5), "a", &a));
  CHECK_OK(st_input(st_shape1(3), "b", &b));
  st_node *m1 = call2(made(st_multiply(&l), &l), call1(dense(6, ST_ACT_TANH), a),
                      call1(dense(6, ST_ACT_TANH), b));
  st_node *y = call1(dense(C, ST_ACT_LINEAR), m1);
  st_node *ins[2] = {a, b};
  st_model *m = NULL;
  CHECK_OK(st_functional_create(ins, 2, &y, 1, NULL, &m));
  if (!m) return;
  CHECK(st_model_input_shape(m).rank == 1 && st_model_input_shape(m).dims[0] == 8);
  compile(m);
  model_gradcheck(m, "two inputs");
  fit(m, 1);
  st_model_destroy(m);
}

/* A transformer encoder block on [T, E] tokens, then average over time. */
enum { T = 4, E = 6 };
static float XT[N * T * E];
static st_model *transformer(st_strategy *st) {
  st_layer *l = NULL;
  st_node *x = NULL;
  CHECK_OK(st_input((st_shape){2, {T, E}}, NULL, &x));
  st_mha_options mo = st_multi_head_attention_default_options(2, 3);
  mo.use_causal_mask = true;
  st_node *att = call2(made(st_multi_head_attention_ex(mo, &l), &l), x, x);
  st_node *h = call1(made(st_layernorm(&l), &l), call2(made(st_add(&l), &l), x, att));
  st_node *f = call1(dense(E, ST_ACT_LINEAR), call1(dense(2 * E, ST_ACT_GELU), h));
  st_node *h2 = call1(made(st_layernorm(&l), &l), call2(made(st_add(&l), &l), h, f));
  st_node *y = call1(dense(C, ST_ACT_LINEAR), call1(made(st_global_avgpool1d(&l), &l), h2));
  st_model_options o = st_model_default_options(st_shape1(1));
  o.seed = 6;
  o.strategy = st;
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&x, 1, &y, 1, &o, &m));
  return m;
}

static void test_transformer_block(void) {
  st_model *m = transformer(NULL);
  if (!m) return;
  compile(m);
  model_gradcheck_x(m, "transformer block", XT);
  /* Keras 3 JSON: attention's call (query, value, use_causal_mask) and back */
  char *json = NULL, *again = NULL;
  CHECK_OK(st_model_to_keras_json(m, &json));
  CHECK(json && strstr(json, "\"use_causal_mask\": true") && strstr(json, "LayerNormalization"));
  st_model_options o = st_model_default_options(st_shape1(1));
  o.name = NULL;
  st_model *b = NULL;
  CHECK_OK(st_model_from_keras_json_text(json, json ? strlen(json) : 0, "block.json", &o, &b));
  CHECK_OK(st_model_to_keras_json(b, &again));
  CHECK_MSG(json && again && !strcmp(json, again), "re-exported JSON differs");
  free(json), free(again);
  st_model_destroy(b);
  st_model_destroy(m);
}

/* Graphs keep the synchronous property: 2 replicas = one device, byte for
 * byte, and the pipeline (2 stages, 4 micro-batches) = one device with 4
 * threads, as for Sequential models. */
static void same_bytes(st_model *a, st_model *b, const char *what) {
  fit(a, 2), fit(b, 2);
  CHECK_MSG(a->net.n_params == b->net.n_params &&
                memcmp(a->net.params, b->net.params, a->net.n_params * sizeof(float)) == 0,
            "%s: different weights", what);
  st_model_destroy(a), st_model_destroy(b);
}
static st_strategy *strategy_of(st_strategy_options o) {
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&o, &s));
  return s;
}
static st_model *owned(st_model *m) {
  if (m) m->owns_strategy = true;
  if (m) compile(m);
  return m;
}

static void test_graph_strategies(void) {
  st_strategy_options one = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  one.threads = 2; /* one device splits a batch over its threads as 2 replicas do */
  st_strategy_options mir = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  mir.replicas = 2;
  mir.threads = 1;
  same_bytes(owned(residual(strategy_of(one))), owned(residual(strategy_of(mir))), "mirrored x2");
  st_strategy_options four = one;
  four.threads = 4;
  st_strategy_options pipe = st_strategy_default_options(ST_STRATEGY_PIPELINE);
  pipe.pipeline_stages = 2;
  pipe.micro_batches = 4;
  same_bytes(owned(residual(strategy_of(four))), owned(residual(strategy_of(pipe))),
             "pipeline 2 stages");
}

/* Stage boundaries in a graph: only where one tensor crosses. */
static void test_pipeline_cuts(void) {
  st_strategy_options pipe = st_strategy_default_options(ST_STRATEGY_PIPELINE);
  pipe.stage_boundaries = "1"; /* before dense_1: h crosses, read again by add and concatenate */
  st_model *m = residual(strategy_of(pipe));
  m->owns_strategy = true;
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK(st_model_compile(m, &co) == ST_OK); /* one tensor (h) crosses */
  st_model_destroy(m);
  pipe.stage_boundaries = "2"; /* before add: h and dense_1's output cross */
  m = residual(strategy_of(pipe));
  m->owns_strategy = true;
  CHECK(st_model_compile(m, &co) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "2 tensors") && strstr(st_last_error(), "'add'"), "%s",
            st_last_error());
  st_model_destroy(m);
}

static void test_errors(void) {
  st_node *x = NULL, *other = NULL, *out = NULL;
  CHECK_OK(st_input(st_shape1(D), NULL, &x));
  CHECK_OK(st_input(st_shape1(4), "other", &other));
  CHECK(st_input(st_shape1(0), NULL, &out) == ST_ERR_INVALID && !out);
  CHECK(st_input(st_shape1(3), NULL, NULL) == ST_ERR_INVALID);
  st_layer *d = dense(4, ST_ACT_RELU);
  CHECK(st_layer_call(d, NULL, 1, &out) == ST_ERR_INVALID);
  CHECK(st_layer_call(d, &x, 0, &out) == ST_ERR_INVALID);
  CHECK(st_layer_call(NULL, &x, 1, &out) == ST_ERR_INVALID);
  st_node *h = call1(d, x);
  /* built for [8]: called on [4] */
  CHECK(st_layer_call(d, &other, 1, &out) == ST_ERR_INVALID && !out);
  CHECK_MSG(strstr(st_last_error(), "8)") && strstr(st_last_error(), "4)"), "%s",
            st_last_error());
  /* a Dense on two inputs */
  st_node *two[2] = {x, x};
  st_layer *d2 = dense(3, ST_ACT_LINEAR);
  CHECK(st_layer_call(d2, two, 2, &out) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "Dense") && strstr(st_last_error(), "2 inputs"), "%s",
            st_last_error());
  /* an output that reads an input the model was not given */
  st_model *m = NULL;
  CHECK(st_functional_create(&other, 1, &h, 1, NULL, &m) == ST_ERR_INVALID && !m);
  CHECK_MSG(strstr(st_last_error(), "disconnected") && strstr(st_last_error(), "Dense"), "%s",
            st_last_error());
  CHECK(st_functional_create(&x, 1, &x, 1, NULL, &m) == ST_ERR_INVALID);
  CHECK(st_functional_create(&h, 1, &h, 1, NULL, &m) == ST_ERR_INVALID);
  st_node *outs[2] = {h, h};
  CHECK(st_functional_create(&x, 1, outs, 2, NULL, &m) == ST_ERR_INVALID);
  CHECK(st_functional_create(&x, 1, &h, 1, NULL, NULL) == ST_ERR_INVALID);
  /* the model takes d (and x); its layers are then the model's */
  CHECK_OK(st_functional_create(&x, 1, &h, 1, NULL, &m));
  CHECK(st_model_add(m, dense(2, ST_ACT_LINEAR)) == ST_ERR_INVALID);
  CHECK(st_layer_call(d, &x, 1, &out) == ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "belongs to a model") != NULL);
  st_model *m2 = NULL;
  CHECK(st_functional_create(&x, 1, &h, 1, NULL, &m2) == ST_ERR_INVALID && !m2);
  /* a layer called in a graph cannot join a Sequential model */
  st_layer *g = dense(2, ST_ACT_LINEAR);
  (void)call1(g, other);
  st_model_options o = st_model_default_options(st_shape1(4));
  st_model *seq = NULL;
  CHECK_OK(st_sequential_create(&o, &seq));
  CHECK(st_model_add(seq, g) == ST_ERR_INVALID); /* taken and freed, with its node */
  st_model_destroy(seq);
  st_node_destroy(x); /* the model's: ignored */
  st_model_destroy(m);
  st_layer_destroy(d2);
  st_node_destroy(other);
}

static const check_case cases[] = {
    CHECK_CASE(test_chain_equals_sequential), CHECK_CASE(test_shared_layer),
    CHECK_CASE(test_residual),         CHECK_CASE(test_two_inputs),
    CHECK_CASE(test_transformer_block), CHECK_CASE(test_graph_strategies),
    CHECK_CASE(test_pipeline_cuts),    CHECK_CASE(test_errors)};

int main(int argc, char **argv) {
  fixture_argmax_data(11, N, D, C, X, Y);
  st_rng r = st_rng_make(12, 0);
  for (int i = 0; i < N * T * E; i++) XT[i] = st_rng_normal(&r);
  return CHECK_MAIN(argc, argv, cases);
}
