/* Models of two outputs with one loss each (Keras's loss=[...],
 * loss_weights=[...]): the loss is the weighted sum of what two single-head
 * models sharing the trunk give; one SGD step moves each weight by the
 * weighted sum of the single-head steps; the gradient matches finite
 * differences of the model's loss; mirrored x2 trains one device's bytes;
 * predict returns the outputs concatenated; Keras JSON export and import;
 * a custom loop trains fit's bytes; and the refusals (a loss count
 * that does not match, labels of the wrong width, the pipeline). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixtures.h"
#include "model/model.h"
#include "strata/strata.h"

enum { N = 96, D = 8, CA = 10, CB = 3, H = 16 };
static float X[N * D], YA[N], YB[N * CB], Y2[N * (1 + CB)];
static const float WA = 0.7f, WB = 1.5f;

static st_node *call1(st_layer *l, st_node *in) {
  st_node *out = NULL;
  CHECK_OK(st_layer_call(l, &in, 1, &out));
  return out;
}
static st_layer *dense(int units, st_activation a) {
  st_layer *l = NULL;
  CHECK_OK(st_dense(units, a, &l));
  return l;
}
static st_strategy *strategy_of(st_strategy_kind k, int n) {
  st_strategy_options o = st_strategy_default_options(k);
  if (k == ST_STRATEGY_MIRRORED || k == ST_STRATEGY_CENTRAL_STORAGE) o.replicas = n, o.threads = 1;
  else if (k == ST_STRATEGY_PIPELINE) o.pipeline_stages = 2;
  else o.threads = n;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&o, &s));
  return s;
}

/* heads: 1 = A only, 2 = B only, 3 = both (A then B), 4 = both with B reading
 * A's output (Dense 3 tanh): trunk Dense 16 tanh,
 * head A Dense 10 (logits, sparse CE), head B Dense 3 (linear, MSE). */
static st_model *build(int heads, st_strategy *s) {
  st_node *x = NULL, *outs[2];
  CHECK_OK(st_input(st_shape1(D), NULL, &x));
  st_node *h = call1(dense(H, ST_ACT_TANH), x); /* smooth: no kinks for the gradient check */
  int n = 0;
  if (heads & 1) outs[n++] = call1(dense(CA, ST_ACT_LINEAR), h);
  if (heads & 2) outs[n++] = call1(dense(CB, ST_ACT_LINEAR), h);
  if (heads == 4) /* head B reads head A: output 0 also feeds a node */
    outs[0] = call1(dense(CA, ST_ACT_LINEAR), h), outs[1] = call1(dense(CB, ST_ACT_TANH), outs[0]),
    n = 2;
  st_model_options o = st_model_default_options(st_shape1(D));
  o.seed = 5;
  o.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&x, 1, outs, n, &o, &m));
  if (m) m->owns_strategy = s != NULL;
  return m;
}

static void compile(st_model *m, int heads, float lr) {
  st_compile_options co = st_compile_default_options();
  co.optimizer = st_optimizer_default_options(ST_OPT_SGD);
  co.optimizer.lr = st_schedule_constant(lr);
  co.loss = heads == 2 ? ST_LOSS_MSE : ST_LOSS_SPARSE_CE_LOGITS;
  if (heads >= 3) {
    co.nlosses = 2, co.losses[0] = ST_LOSS_SPARSE_CE_LOGITS, co.losses[1] = ST_LOSS_MSE;
    co.nloss_weights = 2, co.loss_weights[0] = WA, co.loss_weights[1] = WB;
  }
  CHECK_OK(st_model_compile(m, &co));
}

static st_dataset *data(int heads, int batch) {
  int w = heads == 1 ? 1 : heads == 2 ? CB : 1 + CB; /* 3, 4: both */
  float *y = heads == 1 ? YA : heads == 2 ? YB : Y2;
  st_tensor xt = {ST_F32, 2, {N, D}, X}, yt = {ST_F32, 2, {N, w}, y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&xt, &yt, 1.0f, false, &ds));
  CHECK_OK(st_dataset_batch(ds, batch, false, &ds));
  return ds;
}

static void make_data(void) {
  fixture_argmax_data(11, N, D, CA, X, YA);
  for (int i = 0; i < N; i++)
    for (int k = 0; k < CB; k++) YB[i * CB + k] = X[i * D + k] - 0.5f * X[i * D + k + 3];
  for (int i = 0; i < N; i++) {
    Y2[i * (1 + CB)] = YA[i];
    memcpy(Y2 + i * (1 + CB) + 1, YB + i * CB, CB * sizeof(float));
  }
}

enum { NT = D * H + H, NA = H * CA + CA, NB = H * CB + CB }; /* trunk, head floats */

/* The single-head models take the two-head model's trunk and head. */
static void share_weights(st_model *both, st_model *a, st_model *b) {
  float w[NT + NA + NB], wa[NT + NA], wb[NT + NB];
  CHECK_EQ((long)st_model_weights_size(both), (long)(NT + NA + NB));
  CHECK_OK(st_model_get_weights(both, w));
  memcpy(wa, w, (NT + NA) * sizeof(float));
  memcpy(wb, w, NT * sizeof(float));
  memcpy(wb + NT, w + NT + NA, NB * sizeof(float));
  CHECK_OK(st_model_set_weights(a, wa));
  CHECK_OK(st_model_set_weights(b, wb));
}

static void test_loss_is_weighted_sum(void) {
  st_model *m = build(3, NULL), *a = build(1, NULL), *b = build(2, NULL);
  compile(m, 3, 0.1f), compile(a, 1, 0.1f), compile(b, 2, 0.1f);
  share_weights(m, a, b);
  st_dataset *d2 = data(3, 32), *da = data(1, 32), *db = data(2, 32);
  st_eval_result e, ea, eb;
  CHECK_OK(st_model_evaluate(m, d2, &e));
  CHECK_OK(st_model_evaluate(a, da, &ea));
  CHECK_OK(st_model_evaluate(b, db, &eb));
  CHECK_EQ(e.noutputs, 2);
  CHECK_EQ(ea.noutputs, 0);
  CHECK_NEAR(e.loss, WA * ea.loss + WB * eb.loss, 1e-5 * (1 + fabs(e.loss)));
  CHECK_NEAR(e.output_loss[0], ea.loss, 1e-5 * (1 + ea.loss));
  CHECK_NEAR(e.output_loss[1], eb.loss, 1e-5 * (1 + eb.loss));
  CHECK_NEAR(e.output_accuracy[0], ea.accuracy, 1e-12);
  /* predict: [N, 10 + 3], head A's columns then head B's */
  st_tensor p2 = {0}, pa = {0}, pb = {0};
  CHECK_OK(st_model_predict(m, d2, &p2));
  CHECK_OK(st_model_predict(a, da, &pa));
  CHECK_OK(st_model_predict(b, db, &pb));
  CHECK_EQ((long)p2.dims[0], (long)N);
  CHECK_EQ((long)p2.dims[1], (long)(CA + CB));
  const float *q = p2.data, *qa = pa.data, *qb = pb.data;
  bool same = true;
  for (int i = 0; i < N; i++)
    same &= !memcmp(q + i * (CA + CB), qa + i * CA, CA * sizeof(float)) &&
            !memcmp(q + i * (CA + CB) + CA, qb + i * CB, CB * sizeof(float));
  CHECK_MSG(same, "predict's rows are not the heads' outputs side by side");
  st_tensor_destroy(&p2), st_tensor_destroy(&pa), st_tensor_destroy(&pb);
  st_dataset_destroy(d2), st_dataset_destroy(da), st_dataset_destroy(db);
  st_model_destroy(m), st_model_destroy(a), st_model_destroy(b);
}

/* One SGD step on the whole set (one batch): each weight of the two-head
 * model moves by WA x head A's step + WB x head B's step (its gradient is
 * the weighted sum); fit's logs give each output's loss and accuracy, on the
 * training and the validation data. */
static void test_one_step(void) {
  st_model *m = build(3, NULL), *a = build(1, NULL), *b = build(2, NULL);
  compile(m, 3, 0.1f), compile(a, 1, 0.1f), compile(b, 2, 0.1f);
  share_weights(m, a, b);
  float w0[NT + NA + NB], w[NT + NA + NB], wa[NT + NA], wb[NT + NB];
  CHECK_OK(st_model_get_weights(m, w0));
  st_dataset *d2 = data(3, N), *da = data(1, N), *db = data(2, N);
  st_fit_options fo = st_fit_default_options();
  st_history h, ha, hb;
  fo.validation = d2;
  CHECK_OK(st_model_fit(m, d2, &fo, &h));
  fo.validation = NULL;
  CHECK_OK(st_model_fit(a, da, &fo, &ha));
  CHECK_OK(st_model_fit(b, db, &fo, &hb));
  /* the epoch's logs per output (the loss before the step: the single heads') */
  CHECK_EQ(h.logs[0].noutputs, 2);
  CHECK_NEAR(h.logs[0].output_loss[0], ha.logs[0].loss, 1e-5 * (1 + ha.logs[0].loss));
  CHECK_NEAR(h.logs[0].output_loss[1], hb.logs[0].loss, 1e-5 * (1 + hb.logs[0].loss));
  CHECK_NEAR(h.logs[0].output_accuracy[0], ha.logs[0].accuracy, 1e-12);
  CHECK_NEAR(h.logs[0].loss, WA * ha.logs[0].loss + WB * hb.logs[0].loss, 1e-5 * (1 + h.logs[0].loss));
  st_eval_result ev;
  CHECK_OK(st_model_evaluate(m, d2, &ev));
  CHECK_NEAR(h.logs[0].val_output_loss[1], ev.output_loss[1], 1e-12);
  CHECK_NEAR(h.logs[0].val_output_accuracy[0], ev.output_accuracy[0], 1e-12);
  st_history_destroy(&h), st_history_destroy(&ha), st_history_destroy(&hb);
  CHECK_OK(st_model_get_weights(m, w));
  CHECK_OK(st_model_get_weights(a, wa));
  CHECK_OK(st_model_get_weights(b, wb));
  double worst = 0;
  for (int i = 0; i < NT + NA + NB; i++) {
    double da_ = i < NT + NA ? wa[i] - w0[i] : 0, db_ = 0;
    if (i < NT) db_ = wb[i] - w0[i];
    else if (i >= NT + NA) db_ = wb[i - NA] - w0[i];
    double want = WA * da_ + WB * db_, got = w[i] - w0[i];
    double err = fabs(got - want) / (1e-4 + fabs(want));
    if (err > worst) worst = err;
  }
  CHECK_MSG(worst < 2e-3, "two-head step differs from the weighted single-head steps: %g", worst);
  st_dataset_destroy(d2), st_dataset_destroy(da), st_dataset_destroy(db);
  st_model_destroy(m), st_model_destroy(a), st_model_destroy(b);
}

/* The replica's gradient of every weight against central finite
 * differences of the loss (float weights, the loss summed in double; a step
 * of 4e-3: float rounding of the loss against the curvature of tanh). */
static void gradient_check(int heads) {
  st_model *m = build(heads, NULL);
  compile(m, heads, 0.1f);
  st_net *net = &m->net;
  st_replica *r = NULL;
  CHECK_OK(st__replica_create(net, net->be, 0, N, net->params, net->state, &r));
  st__replica_forward(net, r, X, N, true, 0);
  st__replica_loss_backward(net, r, X, Y2, N, N, 0, NULL, NULL);
  double worst = 0;
  for (int i = 0; i < (int)net->n_params; i++) {
    float keep = net->params[i], eps = 4e-3f;
    net->params[i] = keep + eps;
    st__replica_forward(net, r, X, N, false, 0);
    double lp = st__replica_loss(net, r, Y2, N) / N;
    net->params[i] = keep - eps;
    st__replica_forward(net, r, X, N, false, 0);
    double lm = st__replica_loss(net, r, Y2, N) / N;
    net->params[i] = keep;
    double fd = (lp - lm) / (2 * eps), g = r->grads[i];
    double err = fabs(fd - g) / (1e-3 + fabs(fd) + fabs(g));
    if (err > worst) worst = err;
  }
  CHECK_MSG(worst < 1e-2, "gradient vs finite differences: relative error %g", worst);
  printf("# gradient check (%s): %zu weights, worst relative error %.2e\n",
         heads == 4 ? "head B on head A" : "two heads", net->n_params, worst);
  st__replica_destroy(r);
  st_model_destroy(m);
}

static void test_gradient_check(void) {
  gradient_check(3);
  gradient_check(4); /* output 0's gradient: its loss's plus what head B sends back */
}

static void same_bytes(st_strategy_kind kind) {
  st_model *one = build(3, strategy_of(ST_STRATEGY_ONE_DEVICE, 2));
  st_model *mir = build(3, strategy_of(kind, 2));
  compile(one, 3, 0.05f), compile(mir, 3, 0.05f);
  st_dataset *ds = data(3, 32);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 2;
  st_history h1, h2;
  CHECK_OK(st_model_fit(one, ds, &fo, &h1));
  CHECK_OK(st_model_fit(mir, ds, &fo, &h2));
  CHECK(h1.logs[1].loss < h1.logs[0].loss);
  CHECK_MSG(one->net.n_params == mir->net.n_params &&
                !memcmp(one->net.params, mir->net.params, one->net.n_params * sizeof(float)),
            "%s x2 trains other weights than one device", st_strategy_kind_name(kind));
  st_history_destroy(&h1), st_history_destroy(&h2);
  st_dataset_destroy(ds);
  st_model_destroy(one), st_model_destroy(mir);
}

/* mirrored x2 and central_storage x2 train one device's bytes. */
static void test_strategy_bytes(void) {
  same_bytes(ST_STRATEGY_MIRRORED);
  same_bytes(ST_STRATEGY_CENTRAL_STORAGE);
}

/* Keras 3 JSON: two output_layers; read back, the model trains the same
 * bytes; the summary lists both heads. */
static void test_keras_and_summary(void) {
  st_model *m = build(3, NULL);
  char *json = NULL, *sum = NULL;
  CHECK_OK(st_model_to_keras_json(m, &json));
  CHECK_MSG(json && strstr(json, "\"output_layers\"") && strstr(json, "\"dense_1\"") &&
                strstr(json, "\"dense_2\""), "%s", json ? json : "(null)");
  st_model_options o = st_model_default_options(st_shape1(D));
  o.seed = 5;
  st_model *back = NULL;
  CHECK_OK(st_model_from_keras_json_text(json, strlen(json), "multi", &o, &back));
  CHECK_EQ((long)st_model_output_shape(back).dims[0], (long)(CA + CB));
  CHECK_OK(st_model_summary(m, &sum));
  CHECK_MSG(sum && strstr(sum, "dense_1") && strstr(sum, "dense_2") && strstr(sum, "Connected to"),
            "%s", sum ? sum : "(null)");
  compile(m, 3, 0.05f), compile(back, 3, 0.05f);
  st_dataset *ds = data(3, 32);
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_history_destroy(&h);
  CHECK_OK(st_model_fit(back, ds, &fo, &h));
  st_history_destroy(&h);
  CHECK_MSG(m->net.n_params == back->net.n_params &&
                !memcmp(m->net.params, back->net.params, m->net.n_params * sizeof(float)),
            "the re-imported model trains other weights");
  free(json), free(sum);
  st_dataset_destroy(ds);
  st_model_destroy(m), st_model_destroy(back);
}

/* A custom loop with st_replica_loss_gradient (the outputs' gradients,
 * concatenated) and st_replica_backward trains fit's bytes. */
static st_status custom_step(st_replica_context *c, void *arg) {
  const st_batch *b = arg;
  st_batch local = st_replica_slice(c, b);
  const float *out = NULL;
  st_status s = st_replica_forward(c, &local, true, &out);
  float dy[32 * (CA + CB)];
  if (s == ST_OK) s = st_replica_loss_gradient(c, local.y, b->size, dy, NULL);
  if (s == ST_OK) s = st_replica_backward(c, dy, NULL);
  return s == ST_OK ? st_replica_apply_gradients(c) : s;
}

static void test_custom_loop(void) {
  st_model *a = build(3, strategy_of(ST_STRATEGY_MIRRORED, 2));
  st_model *b = build(3, strategy_of(ST_STRATEGY_MIRRORED, 2));
  compile(a, 3, 0.05f), compile(b, 3, 0.05f);
  st_dataset *ds = data(3, 32);
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK_OK(st_model_fit(a, ds, &fo, &h));
  st_history_destroy(&h);
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  for (bool end = false;;) {
    st_batch bt;
    CHECK_OK(st_iterator_next(it, &bt, &end));
    if (end) break;
    CHECK_OK(st_strategy_run(b->strategy, custom_step, &bt));
  }
  st_iterator_destroy(it);
  CHECK_MSG(a->net.step == b->net.step && a->net.step == N / 32 &&
                !memcmp(a->net.params, b->net.params, a->net.n_params * sizeof(float)),
            "the custom loop trains other weights than fit (steps %lld, %lld)",
            (long long)a->net.step, (long long)b->net.step);
  st_dataset_destroy(ds);
  st_model_destroy(a), st_model_destroy(b);
}

static void test_refusals(void) {
  st_model *m = build(3, NULL);
  st_compile_options co = st_compile_default_options();
  co.nlosses = 3;
  CHECK(st_model_compile(m, &co) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "nlosses is 3") && strstr(st_last_error(), "2 outputs"), "%s",
            st_last_error());
  compile(m, 3, 0.1f);
  st_dataset *ds = data(1, 32); /* one label column: two outputs need 1 + 3 */
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK(st_model_fit(m, ds, &fo, &h) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "2 outputs need 4"), "%s", st_last_error());
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
  m = build(3, strategy_of(ST_STRATEGY_PIPELINE, 2));
  co = st_compile_default_options();
  CHECK(st_model_compile(m, &co) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "pipeline"), "%s", st_last_error());
  st_model_destroy(m);
  /* the same tensor twice */
  st_node *x = NULL;
  CHECK_OK(st_input(st_shape1(D), NULL, &x));
  st_node *y = call1(dense(2, ST_ACT_LINEAR), x), *outs[2] = {y, y};
  st_model *bad = NULL;
  CHECK(st_functional_create(&x, 1, outs, 2, NULL, &bad) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "same tensor"), "%s", st_last_error());
  CHECK_OK(st_functional_create(&x, 1, &y, 1, NULL, &bad)); /* nothing was taken */
  st_model_destroy(bad);
}

int main(int argc, char **argv) {
  make_data();
  static const check_case cases[] = {
      CHECK_CASE(test_loss_is_weighted_sum), CHECK_CASE(test_one_step),
      CHECK_CASE(test_gradient_check), CHECK_CASE(test_strategy_bytes),
      CHECK_CASE(test_keras_and_summary), CHECK_CASE(test_custom_loop),
      CHECK_CASE(test_refusals),
  };
  return CHECK_MAIN(argc, argv, cases);
}
