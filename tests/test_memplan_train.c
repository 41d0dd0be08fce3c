/* Training activations that share buffers (src/nn/memplan_train.c) in a
 * post-LN transformer encoder block: MultiHeadAttention's, the second
 * Dense's and the Adds' outputs (read by no backward) share slots; so do
 * the GELU Dense's and the LayerNorms' outputs, rebuilt from their cached
 * pre-activation or xhat before a backward reads them (graph.c); a step on
 * those buffers gives the bytes (output, loss, every gradient) of a replica
 * where every output has a buffer of its own, on the cpu and reference
 * backends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/model.h"
#include "nn/net.h"
#include "strata/strata.h"

enum { T = 6, D = 8, FF = 16, N = 3 };

static st_node *call(st_layer *l, st_node *a, st_node *b) {
  st_node *in[2] = {a, b}, *y = NULL;
  CHECK_OK(st_layer_call(l, in, b ? 2 : 1, &y));
  return y;
}

/* x -> LN(x + MHA(x, x)) = h -> LN(h + Dense D(Dense FF gelu(h))) -> GAP1D ->
 * Dense 3; classes of nodes in order: MHA, Add, LN, Dense, Dense, Add, LN,
 * GAP, Dense. */
static st_model *block(void) {
  st_layer *mha, *a1, *n1, *d1, *d2, *a2, *n2, *gap, *head;
  CHECK_OK(st_multi_head_attention(2, 4, &mha));
  CHECK_OK(st_add(&a1));
  CHECK_OK(st_add(&a2));
  CHECK_OK(st_layernorm(&n1));
  CHECK_OK(st_layernorm(&n2));
  CHECK_OK(st_dense(FF, ST_ACT_GELU, &d1));
  CHECK_OK(st_dense(D, ST_ACT_LINEAR, &d2));
  CHECK_OK(st_global_avgpool1d(&gap));
  CHECK_OK(st_dense(3, ST_ACT_LINEAR, &head));
  st_node *x = NULL;
  CHECK_OK(st_input((st_shape){.rank = 2, .dims = {T, D}}, "x", &x));
  st_node *h = call(n1, call(a1, call(mha, x, x), x), NULL);
  st_node *z = call(n2, call(a2, call(d2, call(d1, h, NULL), NULL), h), NULL);
  st_node *y = call(head, call(gap, z, NULL), NULL);
  st_model_options o = st_model_default_options(st_shape1(1));
  o.seed = 5;
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&x, 1, &y, 1, &o, &m));
  if (!m) return NULL;
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(m, &co));
  return m;
}

static void test_plan(void) {
  st_model *m = block();
  if (!m) return;
  const st_net *net = &m->net;
  CHECK_EQ(net->nnodes, 9);
  int slot_of[9], ns = 0;
  size_t per = 0;
  CHECK_OK(st__net_transient_slots(net, slot_of, &ns, &per));
  /* own buffers: the pooling's and the head's outputs; the LayerNorms' (2,
   * 6) and the GELU Dense's (3) outputs are rebuilt */
  for (int k = 0; k < 9; k++) {
    CHECK_MSG((k < 7) == (slot_of[k] >= 0), "node %d: slot %d", k, slot_of[k]);
    CHECK_MSG(st__net_rematerialized(net, k) == (k == 2 || k == 3 || k == 6), "node %d", k);
  }
  CHECK_EQ(per, (size_t)T * FF);
  CHECK_EQ(st__net_remat_floats(net), (size_t)T * FF);
  /* slots of their own sizes (best fit): the GELU Dense's output [T, FF]
   * in one, [T, D] in the others */
  size_t sizes[9], own = 0, sum = 0;
  int ns2 = 0;
  CHECK_OK(st__net_transient_sizes(net, slot_of, &ns2, sizes));
  CHECK_EQ(ns2, ns);
  for (int s = 0; s < ns2; s++) {
    CHECK_MSG(sizes[s] == (size_t)T * D || (sizes[s] == (size_t)T * FF && s == slot_of[3]),
              "slot %d: %zu floats", s, sizes[s]);
    sum += sizes[s];
  }
  for (int k = 0; k < 9; k++)
    if (slot_of[k] < 0) own += st_shape_size(st__net_tensor_shape(net, k));
  st_memplan p; /* per example: own buffers and the slots */
  CHECK_OK(st__net_memplan(net, 2, &p));
  CHECK_EQ(p.train_activation_floats, 2 * (own + sum));
  st_model_destroy(m);
}

/* A replica whose outputs all have buffers of their own (the plan undone). */
static void own_buffers(const st_net *net, st_replica *r, int n) {
  for (int k = 0; k < net->nnodes; k++) {
    if (r->tslot_of[k] >= 0) {
      size_t bytes = (size_t)n * st_shape_size(st__net_tensor_shape(net, k)) * sizeof(float);
      r->acts[k] = r->be->alloc(r->ctx, bytes);
      r->tslot_of[k] = -1;
    }
    r->remat_of[k] = false;
  }
}

static void same_step(const st_backend *be, const char *what) {
  st_model *m = block();
  if (!m) return;
  st_net *net = &m->net;
  st_replica *a = NULL, *b = NULL;
  CHECK_OK(st__replica_create(net, be, 0, N, net->params, net->state, &a));
  CHECK_OK(st__replica_create(net, be, 0, N, net->params, net->state, &b));
  if (!a || !b) return;
  own_buffers(net, b, N);
  float x[N * T * D], y[N] = {0, 2, 1};
  for (int i = 0; i < N * T * D; i++) x[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
  const float *oa = st__replica_forward(net, a, x, N, true, 1);
  const float *ob = st__replica_forward(net, b, x, N, true, 1);
  CHECK_MSG(!memcmp(oa, ob, N * 3 * sizeof(float)), "%s: outputs differ", what);
  double la = st__replica_loss_backward(net, a, x, y, N, N, 1, NULL, NULL);
  double lb = st__replica_loss_backward(net, b, x, y, N, N, 1, NULL, NULL);
  CHECK_MSG(la == lb, "%s: loss %.9g vs %.9g", what, la, lb);
  size_t diff = 0, nz = 0;
  for (size_t i = 0; i < net->n_params; i++) {
    diff += memcmp(&a->grads[i], &b->grads[i], sizeof(float)) != 0;
    nz += a->grads[i] != 0.0f;
  }
  CHECK_MSG(diff == 0, "%s: %zu of %zu gradients differ", what, diff, net->n_params);
  CHECK_GT(nz, net->n_params / 2); /* the step did compute something */
  st__replica_destroy(a), st__replica_destroy(b);
  st_model_destroy(m);
}

static void test_same_step(void) {
  same_step(st_backend_cpu(), "cpu");
  same_step(st_backend_reference(), "reference");
}

static const check_case cases[] = {CHECK_CASE(test_plan), CHECK_CASE(test_same_step)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
