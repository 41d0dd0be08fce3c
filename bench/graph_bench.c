/* Graph-model training throughput and activation memory (issue 28), the
 * Strata side of bench/graph_bench.py:
 *   resnet20     the built-in model (st_builtin_model_create, what
 *                `strata train --model resnet20` trains) on [28, 28, 1]
 *   transformer  a 4-block post-LN transformer encoder built with the
 *                functional C API: input [seq, d_model]; each block
 *                MultiHeadAttention(heads, d_model / heads)(x, x) + x,
 *                LayerNormalization, Dense(ff, gelu), Dense(d_model), + x,
 *                LayerNormalization; GlobalAveragePooling1D, Dense 10.
 * Synthetic data (a fixed seed: uniform inputs, labels i % 10): `distinct`
 * batches repeated for `steps` steps, one epoch of fit; sparse CE on logits,
 * SGD (lr 0.01, no momentum) or Adam (1e-3). Prints one line
 *   RESULT {"samples_per_sec": ..., ...}
 * with fit's samples/s (first `warmup` steps excluded) and the activation
 * memory report of src/nn/memplan.c for the batch. Built by CMake as
 * build/graph_bench (links the static library: the report is internal).
 *   graph_bench --model resnet20|transformer [--batch B] [--steps S]
 *     [--warmup W] [--threads T] [--replicas R] [--opt sgd|adam]
 *     [--layers L] [--seq T] [--dmodel D] [--heads H] [--ff F] [--distinct N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "nn/net.h"
#include "strata/strata.h"

typedef struct cfg {
  const char *model, *opt;
  int batch, steps, warmup, threads, replicas, layers, seq, dmodel, heads, ff, distinct;
} cfg;

#define TRY(x)                                                         \
  do {                                                                 \
    st_status s_ = (x);                                                \
    if (s_ != ST_OK) {                                                 \
      fprintf(stderr, "graph_bench: %s: %s\n", #x, st_last_error());   \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

static st_node *call1(st_layer *l, st_node *x) {
  st_node *y = NULL;
  TRY(st_layer_call(l, &x, 1, &y));
  return y;
}
static st_node *call2(st_layer *l, st_node *a, st_node *b) {
  st_node *in[2] = {a, b}, *y = NULL;
  TRY(st_layer_call(l, in, 2, &y));
  return y;
}

static st_node *encoder_block(const cfg *c, st_node *x) {
  st_layer *mha, *add1, *ln1, *d1, *d2, *add2, *ln2;
  TRY(st_multi_head_attention(c->heads, c->dmodel / c->heads, &mha));
  TRY(st_add(&add1));
  TRY(st_add(&add2));
  st_layernorm_options lo = st_layernorm_default_options();
  lo.epsilon = 1e-5f; /* torch.nn.LayerNorm's default */
  TRY(st_layernorm_ex(lo, &ln1));
  TRY(st_layernorm_ex(lo, &ln2));
  TRY(st_dense(c->ff, ST_ACT_GELU, &d1));
  TRY(st_dense(c->dmodel, ST_ACT_LINEAR, &d2));
  st_node *h = call1(ln1, call2(add1, call2(mha, x, x), x));
  return call1(ln2, call2(add2, call1(d2, call1(d1, h)), h));
}

static st_model *make_model(const cfg *c, st_strategy *s, st_shape *in) {
  st_model_options o = st_model_default_options(st_shape3(28, 28, 1));
  o.seed = 1;
  o.strategy = s;
  st_model *m = NULL;
  if (!strcmp(c->model, "resnet20")) {
    *in = st_shape3(28, 28, 1);
    TRY(st_builtin_model_create("resnet20", &o, &m));
    return m;
  }
  *in = (st_shape){.rank = 2, .dims = {c->seq, c->dmodel}};
  st_node *x = NULL, *y;
  TRY(st_input(*in, "tokens", &x));
  y = x;
  for (int i = 0; i < c->layers; i++) y = encoder_block(c, y);
  st_layer *gap, *head;
  TRY(st_global_avgpool1d(&gap));
  TRY(st_dense(10, ST_ACT_LINEAR, &head));
  y = call1(head, call1(gap, y));
  o.name = "transformer";
  TRY(st_functional_create(&x, 1, &y, 1, &o, &m));
  return m;
}

static void report(const cfg *c, st_model *m, const st_history *h) {
  st_memplan p;
  TRY(st__net_memplan(&m->net, c->batch, &p));
  const double mib = 4.0 / (1024.0 * 1024.0);
  printf("RESULT {\"impl\": \"strata\", \"model\": \"%s\", \"batch\": %d, \"steps\": %d, "
         "\"threads\": %d, \"replicas\": %d, \"opt\": \"%s\", \"params\": %zu, "
         "\"samples_per_sec\": %.2f, \"train_seconds\": %.3f, \"nodes\": %d, "
         "\"activations_mib\": %.2f, \"train_activations_mib\": %.2f, \"caches_mib\": %.2f, \"grad_slots\": %d, "
         "\"grad_buffers_mib\": %.2f, \"grad_per_tensor_mib\": %.2f, "
         "\"inference_peak_mib\": %.2f, \"forward_block_mib\": %.2f, "
         "\"forward_cache_mib\": %.2f}\n",
         c->model, c->batch, c->steps, c->threads, c->replicas, c->opt,
         st_model_param_count(m, true), h->samples_per_sec, h->train_seconds, p.nnodes,
         p.activation_floats * mib, p.train_activation_floats * mib, p.cache_floats * mib, p.grad_slots, p.grad_floats * mib,
         p.grad_per_tensor_floats * mib, p.inference_peak_floats * mib,
         p.infer_block_floats * mib, p.infer_cache_floats * mib);
}

static st_dataset *synthetic(const cfg *c, st_shape in) {
  size_t per = st_shape_size(in), n = (size_t)c->distinct * (size_t)c->batch;
  float *x = malloc(n * per * sizeof *x), *y = malloc(n * sizeof *y);
  if (!x || !y) exit(1);
  uint64_t r = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n * per; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    x[i] = (float)(r >> 40) / (float)(1u << 24);
  }
  for (size_t i = 0; i < n; i++) y[i] = (float)(i % 10);
  st_tensor tx = {ST_F32, in.rank + 1, {(int64_t)n}, x};
  for (int d = 0; d < in.rank; d++) tx.dims[d + 1] = in.dims[d];
  st_tensor ty = {ST_F32, 1, {(int64_t)n}, y};
  st_dataset *ds = NULL;
  TRY(st_dataset_from_tensor_slices(&tx, &ty, 1.0f, true, &ds));
  free(x), free(y); /* copied */
  TRY(st_dataset_batch(ds, c->batch, true, &ds));
  TRY(st_dataset_repeat(ds, -1, &ds));
  TRY(st_dataset_take(ds, c->steps, &ds));
  return ds;
}

static int arg_int(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) exit(2);
  return atoi(argv[++*i]);
}

int main(int argc, char **argv) {
  cfg c = {"resnet20", "sgd", 64, 60, 10, 0, 0, 4, 128, 256, 4, 1024, 4};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--model") && i + 1 < argc) c.model = argv[++i];
    else if (!strcmp(a, "--opt") && i + 1 < argc) c.opt = argv[++i];
    else if (!strcmp(a, "--batch")) c.batch = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--steps")) c.steps = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--warmup")) c.warmup = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--threads")) c.threads = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--replicas")) c.replicas = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--layers")) c.layers = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--seq")) c.seq = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--dmodel")) c.dmodel = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--heads")) c.heads = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--ff")) c.ff = arg_int(argc, argv, &i);
    else if (!strcmp(a, "--distinct")) c.distinct = arg_int(argc, argv, &i);
    else {
      fprintf(stderr, "graph_bench: unknown argument %s (see the file's header)\n", a);
      return 2;
    }
  }
  st_strategy_options so = st_strategy_default_options(
      c.replicas > 1 ? ST_STRATEGY_MIRRORED : ST_STRATEGY_ONE_DEVICE);
  if (c.replicas > 1) so.replicas = c.replicas;
  so.threads = c.threads;
  st_strategy *s = NULL;
  TRY(st_strategy_create(&so, &s));
  st_shape in;
  st_model *m = make_model(&c, s, &in);
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = st_optimizer_default_options(strcmp(c.opt, "adam") ? ST_OPT_SGD : ST_OPT_ADAM);
  co.optimizer.lr = st_schedule_constant(strcmp(c.opt, "adam") ? 0.01f : 1e-3f);
  TRY(st_model_compile(m, &co));
  st_dataset *ds = synthetic(&c, in);
  st_fit_options fo = st_fit_default_options();
  fo.warmup_steps = c.warmup;
  st_history h;
  TRY(st_model_fit(m, ds, &fo, &h));
  report(&c, m, &h);
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
  st_strategy_destroy(s);
  return 0;
}
