/* The activation memory report (src/nn/memplan.c) on graphs small enough to
 * count by hand: a chain (every activation, two gradient buffers, the
 * inference peak of two neighbours), a residual (the skipped tensor stays
 * live across the branch), resnet20 (peak below the sum; the executor's
 * gradient buffers a fraction of one per tensor) and the bad arguments. */
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
  CHECK_EQ(p.grad_floats, (size_t)3 * 2 * 8); /* max activation: the input's 8 */
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
  st_model_destroy(m);
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
                                   CHECK_CASE(test_resnet20), CHECK_CASE(test_bad_arguments)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
