/* The activation memory report (src/nn/memplan.c) on graphs small enough to
 * count by hand: a chain (every activation, two gradient buffers, the
 * inference peak of two neighbours), a residual (the skipped tensor stays
 * live across the branch), resnet20 (peak below the sum; the executor's
 * gradient buffers a fraction of one per tensor) and the bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/model.h"
#include "nn/net.h"
#include "strata/strata.h"

static st_node *dense(st_node *x, int units) {
  st_layer *l = NULL;
  st_node *y = NULL;
  CHECK_OK(st_dense(units, ST_ACT_RELU, &l));
  CHECK_OK(st_layer_call(l, &x, 1, &y));
  return y;
}

static void compile(st_model *m) {
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(m, &co));
}

/* input [8] -> Dense 4 -> Dense 6 -> Dense 2, batch 3. */
static void test_chain(void) {
  st_model *m = NULL;
  st_model_options o = st_model_default_options(st_shape1(8));
  CHECK_OK(st_sequential_create(&o, &m));
  int units[3] = {4, 6, 2};
  for (int i = 0; i < 3; i++) {
    st_layer *l = NULL;
    CHECK_OK(st_dense(units[i], ST_ACT_RELU, &l));
    CHECK_OK(st_model_add(m, l));
  }
  compile(m);
  st_memplan p;
  CHECK_OK(st__net_memplan(&m->net, 3, &p));
  CHECK_EQ(p.nnodes, 3);
  CHECK_EQ(p.activation_floats, (size_t)3 * (4 + 6 + 2));
  CHECK_EQ(p.grad_per_tensor_floats, (size_t)3 * (4 + 6 + 2));
  CHECK_EQ(p.grad_slots, 2);
  /* slots sized for what they hold: dy [2] then Dense 4's gradient [4] in
   * one, Dense 6's [6] in the other (the input's needs none) */
  CHECK_EQ(p.grad_floats, (size_t)3 * (4 + 6));
  CHECK_EQ(p.inference_peak_floats, (size_t)3 * (8 + 4)); /* the input and Dense 4 */
  st_model_destroy(m);
}

/* x [4] -> a = Dense 4 (x) -> b = Dense 4 (a) -> Add(b, x) -> Dense 2. */
static void test_residual(void) {
  st_node *x = NULL, *in[2], *s = NULL;
  CHECK_OK(st_input(st_shape1(4), "x", &x));
  st_node *b = dense(dense(x, 4), 4);
  st_layer *add = NULL;
  CHECK_OK(st_add(&add));
  in[0] = b, in[1] = x;
  CHECK_OK(st_layer_call(add, in, 2, &s));
  st_node *y = dense(s, 2);
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&x, 1, &y, 1, NULL, &m));
  if (!m) return;
  compile(m);
  st_memplan p;
  CHECK_OK(st__net_memplan(&m->net, 5, &p));
  CHECK_EQ(p.nnodes, 4);
  CHECK_EQ(p.activation_floats, (size_t)5 * (4 + 4 + 4 + 2));
  /* x stays live until the Add: x, a, b (12) at the second Dense 4, then x, b, sum */
  CHECK_EQ(p.inference_peak_floats, (size_t)5 * 12);
  CHECK_GE(p.grad_slots, 2);
  /* the Add's output feeds a Dense (whose backward reads it): nothing shared */
  CHECK_EQ(p.train_activation_floats, p.activation_floats);
  st_model_destroy(m);
}

static void test_resnet20(void) {
  st_model_options o = st_model_default_options(st_shape3(28, 28, 1));
  st_model *m = NULL;
  CHECK_OK(st_builtin_model_create("resnet20", &o, &m));
  if (!m) return;
  compile(m);
  st_memplan p;
  CHECK_OK(st__net_memplan(&m->net, 2, &p));
  size_t biggest = (size_t)2 * 28 * 28 * 16;
  CHECK_GT(p.activation_floats, 20 * biggest);       /* 72 nodes, many at 28x28x16 */
  CHECK_LE(p.inference_peak_floats, 4 * biggest);    /* a block's input, two of its tensors */
  CHECK_GE(p.inference_peak_floats, 2 * biggest);
  CHECK_LT(p.grad_floats, p.grad_per_tensor_floats / 4);
  /* training: BatchNormalization's and Add's outputs (read by no backward:
   * ReLU's reads its own output) share a few slots; the rest keep their own */
  int *slot_of = calloc((size_t)p.nnodes, sizeof *slot_of), ns = 0;
  size_t per = 0;
  CHECK_OK(st__net_transient_slots(&m->net, slot_of, &ns, &per));
  for (int k = 0; slot_of && k < p.nnodes; k++) {
    const char *cls = m->net.layers[m->net.nodes[k].layer]->vt->class_name;
    bool shared = !strcmp(cls, "BatchNormalization") || !strcmp(cls, "Add");
    CHECK_MSG(shared == (slot_of[k] >= 0), "node %d (%s): slot %d", k, cls, slot_of[k]);
  }
  free(slot_of);
  CHECK_LE(ns, 4);
  CHECK_EQ(per, (size_t)28 * 28 * 16);
  CHECK_LT(p.train_activation_floats, p.activation_floats * 2 / 3);
  st_model_destroy(m);
}

/* A forward-only pass beyond the training buffers' batch (evaluate /
 * predict, replica_infer.c) gives the bytes a replica whose training
 * buffers hold the batch gives, in a block of the planned size (activations
 * freed after their last reader; the caches shared). */
static void same_inference(st_model *m, const float *x, int n, const char *what) {
  st_net *net = &m->net;
  st_replica *a = NULL, *b = NULL;
  CHECK_OK(st__replica_create(net, net->be, 0, 2, net->params, net->state, &a));
  CHECK_OK(st__replica_create(net, net->be, 0, n, net->params, net->state, &b));
  if (!a || !b) return;
  CHECK_OK(st__replica_reserve_infer(net, a, n));
  CHECK(a->infer != NULL && a->max_batch == n);
  size_t cols = st__net_output_size(net);
  const float *pa = st__replica_forward(net, a, x, n, false, 0);
  const float *pb = st__replica_forward(net, b, x, n, false, 0);
  CHECK_MSG(!memcmp(pa, pb, (size_t)n * cols * sizeof(float)),
            "%s: the forward-only buffers give other outputs", what);
  st__replica_infer_leave(a);
  CHECK_EQ(a->max_batch, 2); /* back to the training buffers */
  CHECK_OK(st__replica_reserve(net, a, 2));
  st__replica_forward(net, a, x, 2, true, 0); /* training runs on them again */
  size_t *off = calloc((size_t)net->nnodes, sizeof *off), total = 0, sum = 0;
  CHECK_OK(st__net_infer_offsets(net, off, &total));
  for (int k = 0; k < net->nnodes; k++) sum += st_shape_size(st__net_tensor_shape(net, k));
  st_memplan p;
  CHECK_OK(st__net_memplan(net, 1, &p));
  printf("# %s: forward-only block %zu floats per example (liveness peak %zu, all "
         "activations %zu)\n", what, total, p.inference_peak_floats, sum);
  CHECK_LT(total, sum);
  free(off);
  st__replica_destroy(a), st__replica_destroy(b);
}

static void test_inference_buffers(void) {
  st_model_options o = st_model_default_options(st_shape3(28, 28, 1));
  st_model *m = NULL;
  CHECK_OK(st_builtin_model_create("resnet20", &o, &m));
  if (!m) return;
  compile(m);
  enum { N = 5 };
  float *x = malloc(N * 784 * sizeof(float));
  for (int i = 0; i < N * 784; i++) x[i] = (float)((i * 37) % 101) / 101.0f;
  same_inference(m, x, N, "resnet20");
  st_model_destroy(m);
  /* attention block: MHA (its cache: Q, K, V, probabilities), Add, LayerNorm */
  st_node *in = NULL, *att = NULL, *sum = NULL, *ln = NULL, *pool = NULL, *out = NULL;
  st_layer *l = NULL;
  st_shape s68 = {.rank = 2, .dims = {6, 8}};
  CHECK_OK(st_input(s68, NULL, &in));
  CHECK_OK(st_multi_head_attention(2, 4, &l));
  st_node *qv[2] = {in, in};
  CHECK_OK(st_layer_call(l, qv, 2, &att));
  CHECK_OK(st_add(&l));
  st_node *pair[2] = {in, att};
  CHECK_OK(st_layer_call(l, pair, 2, &sum));
  CHECK_OK(st_layernorm(&l));
  CHECK_OK(st_layer_call(l, &sum, 1, &ln));
  CHECK_OK(st_global_avgpool1d(&l));
  CHECK_OK(st_layer_call(l, &ln, 1, &pool));
  out = dense(pool, 3);
  CHECK_OK(st_functional_create(&in, 1, &out, 1, NULL, &m));
  if (!m) return;
  compile(m);
  same_inference(m, x, N, "attention block");
  st_model_destroy(m);
  /* two inputs (split into the replica's input buffers) and two outputs */
  st_node *ins[2] = {NULL, NULL}, *outs[2];
  CHECK_OK(st_input(st_shape1(5), NULL, &ins[0]));
  CHECK_OK(st_input(st_shape1(3), NULL, &ins[1]));
  CHECK_OK(st_concatenate(-1, &l));
  st_node *cat = NULL;
  CHECK_OK(st_layer_call(l, ins, 2, &cat));
  st_node *h = dense(cat, 7);
  outs[0] = dense(h, 4), outs[1] = dense(dense(h, 6), 2);
  CHECK_OK(st_functional_create(ins, 2, outs, 2, NULL, &m));
  if (!m) return;
  compile(m);
  same_inference(m, x, N, "two inputs, two outputs");
  st_model_destroy(m);
  free(x);
}

static void test_bad_arguments(void) {
  st_memplan p;
  CHECK_EQ(st__net_memplan(NULL, 4, &p), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "no net") != NULL);
  st_net empty;
  memset(&empty, 0, sizeof empty);
  CHECK_EQ(st__net_memplan(&empty, 4, &p), ST_ERR_INVALID);
}

static const check_case cases[] = {CHECK_CASE(test_chain), CHECK_CASE(test_residual),
                                   CHECK_CASE(test_resnet20), CHECK_CASE(test_inference_buffers),
                                   CHECK_CASE(test_bad_arguments)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
