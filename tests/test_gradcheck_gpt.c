/* Finite-difference gradient checks of GPT-2's layer kinds in a model
 * (issue 31): PositionEmbedding (dembeddings = the batch sum of dy, rows
 * beyond T zero) and ReversibleEmbedding (the head tied to an Embedding: the
 * table's gradient is the sum of the lookup's scatter and the head's dy^T x).
 * The graph ids [T] -> wte: Embedding -> + PositionEmbedding -> LayerNorm ->
 * ReversibleEmbedding(wte) -> logits [T, V], sparse CE over every position;
 * every variable's gradient from backward against central differences of the
 * loss (float, eps 1e-2 on a loss of O(1)). Also: the tied head's checks (not
 * an Embedding, an input of another width, the Embedding outside the model). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/model.h"
#include "nn/net.h"
#include "strata/strata.h"

enum { T = 4, D = 6, V = 7, B = 3 };

static st_node *call(st_layer *l, st_node *a, st_node *b) {
  st_node *in[2] = {a, b}, *out = NULL;
  CHECK_OK(st_layer_call(l, in, b ? 2 : 1, &out));
  return out;
}

static st_model *tiny(void) {
  st_node *ids = NULL;
  CHECK_OK(st_input(st_shape1(T), "ids", &ids));
  st_layer *wte = NULL, *pos = NULL, *add = NULL, *ln = NULL, *head = NULL;
  CHECK_OK(st_embedding(V, D, &wte));
  CHECK_OK(st_position_embedding(T + 2, &pos));
  CHECK_OK(st_add(&add));
  CHECK_OK(st_layernorm(&ln));
  st_node *tok = call(wte, ids, NULL);
  st_node *x = call(add, tok, call(pos, tok, NULL));
  CHECK_OK(st_reversible_embedding(wte, &head));
  st_node *y = call(head, call(ln, x, NULL), NULL);
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&ids, 1, &y, 1, NULL, &m));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(m, &co));
  return m;
}

static double loss_at(st_model *m, st_replica *r, const float *x, const float *y) {
  st__replica_forward(&m->net, r, x, B, true, 0);
  return st__replica_loss(&m->net, r, y, B) / B;
}

static void test_gpt_layers_grad(void) {
  st_model *m = tiny();
  st_net *net = &m->net;
  CHECK_EQ(net->n_params, (size_t)(V * D + (T + 2) * D + 2 * D)); /* the head adds none */
  st_rng rng = st_rng_make(3, 0);
  for (size_t i = 0; i < net->n_params; i++) net->params[i] += 0.3f * (st_rng_uniform(&rng) - 0.5f);
  float x[B * T], y[B * T];
  for (int i = 0; i < B * T; i++) x[i] = (float)(i % 3), y[i] = (float)((i * 5) % V); /* repeated ids */
  st_replica *r = NULL;
  CHECK_OK(st__replica_create(net, net->be, 0, B, net->params, net->state, &r));
  st__replica_forward(net, r, x, B, true, 0);
  st__replica_loss_backward(net, r, x, y, B, B, 0, NULL, NULL);
  float *g = malloc(net->n_params * sizeof *g);
  memcpy(g, r->grads, net->n_params * sizeof *g);
  double worst = 0;
  for (size_t i = 0; i < net->n_params; i++) {
    float keep = net->params[i], eps = 1e-2f;
    net->params[i] = keep + eps;
    double lp = loss_at(m, r, x, y);
    net->params[i] = keep - eps;
    double lm = loss_at(m, r, x, y);
    net->params[i] = keep;
    double fd = (lp - lm) / (2.0 * eps), err = fabs(fd - g[i]);
    if (err > worst) worst = err;
    CHECK_MSG(err <= 2e-3 + 2e-2 * fabs(fd), "variable float %zu: backward %g, differences %g", i,
              (double)g[i], fd);
  }
  /* rows T, T+1 of the position table are never read: zero gradient */
  size_t pos0 = (size_t)V * D;
  for (size_t i = (size_t)T * D; i < (size_t)(T + 2) * D; i++) CHECK(g[pos0 + i] == 0.0f);
  printf("worst |backward - differences| %.3g over %zu floats\n", worst, net->n_params);
  free(g);
  st__replica_destroy(r);
  st_model_destroy(m);
}

static void test_reversible_errors(void) {
  st_layer *d = NULL, *e = NULL, *h = NULL;
  CHECK_OK(st_dense(4, ST_ACT_LINEAR, &d));
  CHECK(st_reversible_embedding(d, &h) == ST_ERR_INVALID && strstr(st_last_error(), "not an Embedding"));
  CHECK(st_reversible_embedding(NULL, &h) == ST_ERR_INVALID);
  CHECK_OK(st_embedding(V, D, &e));
  CHECK_OK(st_reversible_embedding(e, &h));
  st_node *ids = NULL, *x = NULL, *t = NULL, *out = NULL;
  CHECK_OK(st_input(st_shape1(T), NULL, &ids));
  CHECK_OK(st_input(((st_shape){2, {T, D + 1}}), NULL, &x));
  CHECK(st_layer_call(h, &x, 1, &out) == ST_ERR_INVALID && strstr(st_last_error(), "not built"));
  CHECK_OK(st_layer_call(e, &ids, 1, &t));
  CHECK(st_layer_call(h, &x, 1, &out) == ST_ERR_INVALID &&
        strstr(st_last_error(), "embedding width 6"));
  /* the Embedding not in the model: a model from x alone through the head */
  st_node *x2 = NULL;
  CHECK_OK(st_input(((st_shape){2, {T, D}}), NULL, &x2));
  CHECK_OK(st_layer_call(h, &x2, 1, &out));
  st_model *m = NULL;
  CHECK(st_functional_create(&x2, 1, &out, 1, NULL, &m) == ST_ERR_INVALID &&
        strstr(st_last_error(), "is not in the model"));
  st_position_embedding_options po = st_position_embedding_default_options(0);
  st_layer *p = NULL;
  CHECK(st_position_embedding_ex(po, &p) == ST_ERR_INVALID && !p && strstr(st_last_error(), "sequence_length"));
  st_layer_destroy(h);
  st_layer_destroy(e);
  st_layer_destroy(d);
  st_node_destroy(ids), st_node_destroy(x), st_node_destroy(x2);
}

static const check_case cases[] = {CHECK_CASE(test_gpt_layers_grad), CHECK_CASE(test_reversible_errors)};
int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
