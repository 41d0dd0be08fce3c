/* Synchronous strategies, the key property: N replicas with global batch B
 * give the weights one device gives with batch B (within float rounding) —
 * mirrored with 2 and 3 replicas and central storage with 2, for the built-in
 * mlp and cnn, 20 Adam steps at global batch 64 — and repeated runs are
 * bit-identical. Also: mirrored copies stay identical (a one-device model
 * loaded with replica 0's weights predicts the same bytes the mirrored model
 * predicts across all replicas), uneven splits (3 replicas, batch 128, a
 * dataset not a multiple of the batch), BatchNorm under both strategies, and
 * option errors. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "distribute/reducer.h"
#include "model/model.h"
#include "strata/strata.h"

enum { N = 1280 + 40, PIX = 28 * 28 };
static uint8_t X[N * PIX], Y[N];

static void make_data(void) {
  st_rng r = st_rng_make(9, 0);
  for (int i = 0; i < N; i++) {
    Y[i] = (uint8_t)st_rng_below(&r, 10);
    for (int p = 0; p < PIX; p++) /* a class-dependent band plus noise */
      X[i * PIX + p] = (uint8_t)(((p / 28) / 3 == Y[i] ? 160 : 0) + st_rng_below(&r, 90));
  }
}

static st_dataset *dataset(int n, int batch) {
  st_tensor x = {ST_U8, 4, {n, 28, 28, 1}, X}, y = {ST_U8, 1, {n}, Y};
  st_dataset *ds = NULL;
  if (st_dataset_from_tensor_slices(&x, &y, 1.0f / 255, false, &ds) != ST_OK) return NULL;
  if (st_dataset_shuffle(ds, n, 3, true, &ds) != ST_OK) return NULL;
  (void)st_dataset_batch(ds, batch, false, &ds); /* NULL on failure */
  return ds;
}

typedef struct run {
  st_strategy_kind kind;
  int replicas; /* mirrored/central storage; one_device: threads */
  size_t bytes_per_pack; /* mirrored; 0 = the default */
  bool no_overlap;
} run;

/* The optimizer make_model compiles with: Adam (the default) or SGD. */
static st_optimizer_kind g_optimizer = ST_OPT_ADAM;

static st_model *make_model(const char *name, run r) {
  st_strategy_options so = st_strategy_default_options(r.kind);
  if (r.kind == ST_STRATEGY_ONE_DEVICE)
    so.threads = r.replicas;
  else
    so.replicas = r.replicas;
  if (r.bytes_per_pack) so.bytes_per_pack = r.bytes_per_pack == 1 ? 0 : r.bytes_per_pack;
  so.no_overlap = r.no_overlap;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  CHECK(st_strategy_num_replicas_in_sync(s) == (r.kind == ST_STRATEGY_ONE_DEVICE ? 1 : r.replicas));
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  mo.seed = 11;
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_builtin_model_create(name, &mo, &m));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  co.optimizer = st_optimizer_default_options(g_optimizer);
  CHECK_OK(st_model_compile(m, &co));
  m->owns_strategy = true;
  return m;
}

/* Train over n examples at `batch`, `epochs` times; copy of the weights. */
static float *train(const char *name, run r, int n, int batch, int epochs, size_t *np,
                    st_model **keep) {
  st_model *m = make_model(name, r);
  st_dataset *ds = dataset(n, batch);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = epochs;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  CHECK(m->net.step == (int64_t)epochs * ((n + batch - 1) / batch));
  *np = m->net.n_params;
  float *w = malloc(*np * sizeof(float));
  memcpy(w, m->net.params, *np * sizeof(float));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  if (keep)
    *keep = m;
  else
    st_model_destroy(m);
  return w;
}

/* Different splits sum gradients in different orders: equal up to rounding,
 * asserted with SGD (Adam divides by sqrt(v), turning rounding-level
 * differences of near-zero gradients into full steps: 5e-5 on the cnn here);
 * with Adam the same split is asserted bit-identical. */
static void test_equivalence(const char *name) {
  const run one = {ST_STRATEGY_ONE_DEVICE, 1, 0, false}, two = {ST_STRATEGY_ONE_DEVICE, 2, 0, false};
  const run m2 = {ST_STRATEGY_MIRRORED, 2, 0, false}, m3 = {ST_STRATEGY_MIRRORED, 3, 0, false};
  const run c2 = {ST_STRATEGY_CENTRAL_STORAGE, 2, 0, false};
  size_t n;
  /* 1280 examples at batch 64 = 20 steps */
  g_optimizer = ST_OPT_SGD;
  float *w1 = train(name, one, 1280, 64, 1, &n, NULL);
  float *wm2 = train(name, m2, 1280, 64, 1, &n, NULL), *wm3 = train(name, m3, 1280, 64, 1, &n, NULL);
  float *wc2 = train(name, c2, 1280, 64, 1, &n, NULL);
  double d_m2 = check_rel_diff(w1, wm2, n), d_m3 = check_rel_diff(w1, wm3, n), d_c2 = check_rel_diff(w1, wc2, n);
  fprintf(stderr, "%s, SGD: one device vs mirrored 2: %.3g, mirrored 3: %.3g, central storage 2: %.3g\n",
          name, d_m2, d_m3, d_c2);
  CHECK(d_m2 <= 1e-5 && d_m3 <= 1e-5 && d_c2 <= 1e-5);
  free(w1), free(wm2), free(wm3), free(wc2);
  g_optimizer = ST_OPT_ADAM;
  float *w1t = train(name, two, 1280, 64, 1, &n, NULL);
  wm2 = train(name, m2, 1280, 64, 1, &n, NULL);
  wc2 = train(name, c2, 1280, 64, 1, &n, NULL);
  float *wm2b = train(name, m2, 1280, 64, 1, &n, NULL);
  /* the training threads flush subnormals (base/fpenv.h); the caller's
   * floating-point state is its own again after fit */
  volatile float tiny = 1e-30f, scale = 1e-10f;
  CHECK_MSG(tiny * scale != 0.0f, "fit left flush-to-zero on in the caller's thread");
  CHECK_MSG(memcmp(wm2, wm2b, n * sizeof(float)) == 0, "%s: mirrored repeat differs", name);
  /* same split, same reduction order: bit-identical across strategies */
  CHECK_MSG(memcmp(w1t, wm2, n * sizeof(float)) == 0, "%s: mirrored 2 != one_device 2 threads", name);
  CHECK_MSG(memcmp(w1t, wc2, n * sizeof(float)) == 0, "%s: central storage 2 != one_device 2", name);
  free(w1t), free(wm2), free(wc2), free(wm2b);
}

/* Gradient packs: one pack, a pack per layer, overlap on and off — the same
 * bytes (packing only changes when a range is reduced). The plan covers the
 * gradient buffer exactly, in the order backward completes it. */
static void test_packs(void) {
  size_t n;
  float *ref = train("cnn", (run){ST_STRATEGY_MIRRORED, 2, 0, false}, 640, 64, 1, &n, NULL);
  const run variants[] = {{ST_STRATEGY_MIRRORED, 2, 1, false},    /* 0 bytes: one pack */
                          {ST_STRATEGY_MIRRORED, 2, 4096, false}, /* a pack per layer */
                          {ST_STRATEGY_MIRRORED, 2, 4096, true},
                          {ST_STRATEGY_MIRRORED, 3, 65536, false}};
  for (int v = 0; v < 4; v++) {
    float *w = train("cnn", variants[v], 640, 64, 1, &n, NULL);
    if (variants[v].replicas == 2)
      CHECK_MSG(memcmp(ref, w, n * sizeof(float)) == 0, "pack variant %d differs", v);
    else
      CHECK(check_rel_diff(ref, w, n) <= 1e-5);
    free(w);
  }
  free(ref);
  st_model *m = make_model("cnn", (run){ST_STRATEGY_ONE_DEVICE, 1, 0, false});
  float *grads[2] = {m->net.params, m->net.params};
  size_t sizes[] = {0, 4096, 65536};
  int expect[] = {1, 4, 3}; /* 64 KiB: dense_1+dense | conv2d_1 (74 KB) | conv2d */
  for (int t = 0; t < 3; t++) {
    st_reducer *r = NULL;
    CHECK_OK(st__reducer_create(&m->net, 2, grads, sizes[t], true, ST_CROSS_ALL_REDUCE, NULL, NULL, &r));
    int nb = st__reducer_bucket_count(r);
    CHECK_MSG(nb == expect[t], "bytes_per_pack %zu: %d buckets", sizes[t], nb);
    size_t hi = m->net.n_params;
    int last_layer = m->net.nlayers;
    for (int k = 0; k < nb; k++) { /* contiguous, descending, layers in backward order */
      const st_bucket *b = st__reducer_bucket(r, k);
      CHECK(b->lo + b->len == hi && b->first_layer < last_layer);
      hi = b->lo;
      last_layer = b->first_layer;
    }
    CHECK(hi == 0);
    st__reducer_destroy(r);
  }
  st_model_destroy(m);
}

/* A hand-written step through st_strategy_run gives the bytes fit gives. */
typedef struct loop_args {
  const st_batch *b;
  double loss[64];
} loop_args;

static st_status loop_step(st_replica_context *ctx, void *arg) {
  loop_args *a = arg;
  st_batch local = st_replica_slice(ctx, a->b);
  st_status s = st_replica_compute_gradients(ctx, &local, a->b->size, &a->loss[st_replica_id(ctx)], NULL);
  return s != ST_OK ? s : st_replica_apply_gradients(ctx);
}

static void test_custom_loop(run r) {
  size_t n;
  float *ref = train("mlp", r, 640, 64, 1, &n, NULL);
  st_model *m = make_model("mlp", r);
  st_dataset *ds = dataset(640, 64);
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  double total = 0;
  for (bool end = false;;) {
    st_batch b;
    CHECK_OK(st_iterator_next(it, &b, &end));
    if (end) break;
    loop_args a = {.b = &b};
    CHECK_OK(st_strategy_run(m->strategy, loop_step, &a));
    for (int i = 0; i < st_strategy_num_replicas_in_sync(m->strategy); i++) total += a.loss[i];
  }
  CHECK(m->net.step == 10 && total > 0);
  CHECK_MSG(memcmp(ref, m->net.params, n * sizeof(float)) == 0, "custom loop (%s, %d) != fit",
            st_strategy_kind_name(r.kind), r.replicas);
  float per[3] = {1, 2, 4}, out;
  CHECK_OK(st_strategy_reduce(m->strategy, ST_REDUCE_SUM, per, 1, &out));
  CHECK(out == (r.kind == ST_STRATEGY_ONE_DEVICE ? 1.0f : r.replicas == 2 ? 3.0f : 7.0f));
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
  st_model_destroy(m);
  free(ref);
}

/* 3 replicas, global batch 128 over 1320 examples (10 full batches + 40). */
static void test_uneven_and_copies(void) {
  size_t n;
  st_model *mm = NULL;
  float *a = train("mlp", (run){ST_STRATEGY_ONE_DEVICE, 1, 0, false}, N, 128, 1, &n, NULL);
  float *b = train("mlp", (run){ST_STRATEGY_MIRRORED, 3, 0, false}, N, 128, 1, &n, &mm);
  CHECK(check_rel_diff(a, b, n) <= 1e-5);
  /* the mirrored copies are identical: compare with a one-device model */
  char dir[] = "/tmp/strata_strategy_XXXXXX", path[256];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  CHECK_OK(st_model_save_weights(mm, path));
  st_model *od = make_model("mlp", (run){ST_STRATEGY_ONE_DEVICE, 1, 0, false});
  CHECK_OK(st_model_load_weights(od, path));
  st_tensor x = {ST_U8, 4, {N, 28, 28, 1}, X}, y = {ST_U8, 1, {N}, Y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &y, 1.0f / 255, false, &ds));
  CHECK_OK(st_dataset_batch(ds, 99, false, &ds));
  st_tensor p1, p2;
  CHECK_OK(st_model_predict(mm, ds, &p1));
  CHECK_OK(st_model_predict(od, ds, &p2));
  CHECK(p1.dims[0] == N && memcmp(p1.data, p2.data, (size_t)N * 10 * sizeof(float)) == 0);
  /* loading weights into the mirrored model reaches every replica */
  CHECK_OK(st_model_load_weights(mm, path));
  st_tensor p3;
  CHECK_OK(st_model_predict(mm, ds, &p3));
  CHECK(memcmp(p1.data, p3.data, (size_t)N * 10 * sizeof(float)) == 0);
  unlink(path);
  rmdir(dir);
  st_tensor_destroy(&p1), st_tensor_destroy(&p2), st_tensor_destroy(&p3);
  st_dataset_destroy(ds);
  st_model_destroy(mm);
  st_model_destroy(od);
  free(a), free(b);
}

/* BatchNorm: replicas keep the moving statistics equal (averaged). */
static void test_batchnorm(st_strategy_kind kind) {
  st_strategy_options so = st_strategy_default_options(kind);
  so.replicas = 2;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_flatten(&l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(32, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_batchnorm(&l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(10, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  CHECK_OK(st_model_compile(m, &co));
  st_dataset *ds = dataset(640, 64);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 2;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  CHECK(h.logs[1].loss < h.logs[0].loss);
  float mean0 = m->net.state[0];
  CHECK(mean0 != 0.0f); /* moving mean moved */
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
  st_strategy_destroy(s);
}

/* Synchronized BatchNorm: statistics over the global batch, so mirrored and
 * central storage match one device (which normalises the whole batch), also
 * with empty slices (global batch 2 over 3 replicas). */
static st_model *sync_bn_model(st_strategy_kind kind, int replicas) {
  st_strategy_options so = st_strategy_default_options(kind);
  if (kind != ST_STRATEGY_ONE_DEVICE) so.replicas = replicas;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  mo.strategy = s;
  mo.seed = 4;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_batchnorm_options bo = st_batchnorm_default_options();
  bo.synchronized = true;
  /* no conv bias: BatchNorm cancels it, so its gradient is rounding noise
   * that Adam would amplify to full steps */
  st_conv2d_options cv = st_conv2d_default_options(4, 3, 3);
  cv.use_bias = false;
  st_layer *l = NULL;
  CHECK_OK(st_conv2d_ex(cv, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_batchnorm_ex(bo, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_activation_layer(ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_flatten(&l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(10, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  CHECK_OK(st_model_compile(m, &co));
  m->owns_strategy = true;
  return m;
}

static void test_sync_batchnorm(int n, int batch, int replicas) {
  st_model *ref = sync_bn_model(ST_STRATEGY_ONE_DEVICE, 1);
  st_model *mir = sync_bn_model(ST_STRATEGY_MIRRORED, replicas);
  st_model *cen = sync_bn_model(ST_STRATEGY_CENTRAL_STORAGE, replicas);
  st_model *ms[3] = {ref, mir, cen};
  for (int k = 0; k < 3; k++) {
    st_dataset *ds = dataset(n, batch);
    st_fit_options fo = st_fit_default_options();
    st_history h;
    CHECK_OK(st_model_fit(ms[k], ds, &fo, &h));
    st_history_destroy(&h);
    st_dataset_destroy(ds);
  }
  double dp1 = check_rel_diff(ref->net.params, mir->net.params, ref->net.n_params);
  double dp2 = check_rel_diff(ref->net.params, cen->net.params, ref->net.n_params);
  double ds1 = check_rel_diff(ref->net.state, mir->net.state, ref->net.n_state);
  double ds2 = check_rel_diff(ref->net.state, cen->net.state, ref->net.n_state);
  fprintf(stderr, "sync BN, %d replicas, batch %d: params %.3g %.3g, moving stats %.3g %.3g\n",
          replicas, batch, dp1, dp2, ds1, ds2);
  CHECK(dp1 <= 1e-4 && dp2 <= 1e-4 && ds1 <= 1e-4 && ds2 <= 1e-4);
  for (int k = 0; k < 3; k++) st_model_destroy(ms[k]);
}

static void test_options(void) {
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  st_strategy *s = NULL;
  so.devices = "cpu:0,cpu:1,cpu:2";
  CHECK_OK(st_strategy_create(&so, &s));
  CHECK(st_strategy_num_replicas_in_sync(s) == 3);
  st_strategy_destroy(s);
  so.devices = "cpu:0,cpu:0";
  CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID && strstr(st_last_error(), "twice"));
  so.devices = "cpu:0,tpu:1";
  CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID && strstr(st_last_error(), "tpu:1"));
  so.devices = "gpu:0";
  CHECK(st_strategy_create(&so, &s) == ST_ERR_NOT_BUILT);
  so.devices = NULL;
  so.cross_device_ops = "ring";
  CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID && strstr(st_last_error(), "ring"));
  so.cross_device_ops = "reduction_to_one_device";
  so.replicas = 2;
  CHECK_OK(st_strategy_create(&so, &s));
  st_strategy_destroy(s);
  so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  CHECK_OK(st_strategy_create(&so, &s)); /* default: one replica per core */
  CHECK(st_strategy_num_replicas_in_sync(s) >= 1);
  st_strategy_destroy(s);
  so = st_strategy_default_options(ST_STRATEGY_PARAMETER_SERVER);
  CHECK(st_strategy_create(&so, &s) == ST_ERR_NOT_BUILT);
}

/* "cpu:0,cpu:1,...": n entries (a heap string; the caller frees it). */
static char *device_list(int n) {
  char *list = malloc((size_t)n * 12 + 1), *p = list;
  for (int i = 0; list && i < n; i++) p += sprintf(p, "%scpu:%d", i ? "," : "", i);
  return list;
}

/* Over ST_MAX_REPLICAS devices or replicas: ST_ERR_INVALID naming the count
 * and the limit, nothing created; 100,000 entries are counted, not walked
 * quadratically. At the limit: created. */
static void test_limits(void) {
  static const int counts[] = {ST_MAX_REPLICAS + 1, 70, 1000, 100000};
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
    char *list = device_list(counts[k]), want[64];
    st_strategy *s = (st_strategy *)&so; /* must come back NULL */
    so.devices = list;
    snprintf(want, sizeof want, "%d devices given, at most %d (ST_MAX_REPLICAS)", counts[k],
             ST_MAX_REPLICAS);
    CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID);
    CHECK_MSG(strstr(st_last_error(), want) != NULL, "'%s'", st_last_error());
    CHECK(s == NULL);
    free(list);
  }
  char *list = device_list(ST_MAX_REPLICAS);
  st_strategy *s = NULL;
  so.devices = list;
  CHECK_OK(st_strategy_create(&so, &s));
  CHECK(st_strategy_num_replicas_in_sync(s) == ST_MAX_REPLICAS);
  st_strategy_destroy(s);
  free(list);
  so.devices = NULL;
  so.replicas = ST_MAX_REPLICAS + 1;
  s = (st_strategy *)&so;
  CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID && s == NULL);
  CHECK_MSG(strstr(st_last_error(), "65 replicas given, at most 64 (ST_MAX_REPLICAS)") != NULL,
            "'%s'", st_last_error());
}

/* A map that fails on its `fail_at`-th call (counting from 0). */
typedef struct failing_map {
  int calls, fail_at;
  pthread_t caller;
  bool failed_elsewhere; /* the failing call ran on another thread */
} failing_map;
static st_status fail_map(void *user, float *x, size_t xs, float *y, size_t ys) {
  (void)x, (void)xs, (void)y, (void)ys;
  failing_map *f = user;
  if (f->calls++ != f->fail_at) return ST_OK;
  f->failed_elsewhere = !pthread_equal(pthread_self(), f->caller);
  return st_error(ST_ERR_INVALID, "element %d of the pipeline is bad", f->fail_at);
}

/* An input pipeline error in the middle of an epoch: fit stops with it, its
 * message intact, after the steps before the failing batch, whichever thread
 * assembled that batch (one_device takes the next batch beside the optimizer
 * update, on one of its threads; mirrored on the caller's). */
static bool test_pipeline_error(run r) {
  st_model *m = make_model("mlp", r);
  st_tensor x = {ST_U8, 4, {256, 28, 28, 1}, X}, y = {ST_U8, 1, {256}, Y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &y, 1.0f / 255, false, &ds));
  failing_map f = {0, 100, pthread_self(), false};
  CHECK_OK(st_dataset_shuffle(ds, 256, 3, true, &ds));
  CHECK_OK(st_dataset_map(ds, fail_map, &f, &ds));
  CHECK_OK(st_dataset_batch(ds, 32, false, &ds));
  st_fit_options fo = st_fit_default_options();
  st_history h = {0};
  st_clear_error();
  st_status s = st_model_fit(m, ds, &fo, &h);
  CHECK_MSG(s == ST_ERR_INVALID, "%s: fit returned %d", st_strategy_kind_name(r.kind), (int)s);
  CHECK_MSG(strstr(st_last_error(), "element 100 of the pipeline is bad") != NULL,
            "error message: '%s'", st_last_error());
  CHECK_MSG(m->net.step == 3, "%lld steps before the failing batch (elements 96..127), want 3",
            (long long)m->net.step);
  CHECK(f.calls == 101); /* nothing read past the failure */
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
  return f.failed_elsewhere;
}

/* An input pipeline error: fits until a worker thread assembled the failing
 * batch (which thread takes the next batch is a race), then the other runs. */
static void test_pipeline_errors(void) {
  int on_worker = 0, tries = 0;
  for (; tries < 20 && !on_worker; tries++)
    on_worker += test_pipeline_error((run){ST_STRATEGY_ONE_DEVICE, 2, 0, false});
  printf("pipeline error: failing batch assembled on a pool thread in %d of %d fits\n",
         on_worker, tries);
  test_pipeline_error((run){ST_STRATEGY_ONE_DEVICE, 1, 0, false});
  test_pipeline_error((run){ST_STRATEGY_MIRRORED, 2, 0, false});
}
static void test_equivalence_mlp(void) { test_equivalence("mlp"); }
static void test_equivalence_cnn(void) { test_equivalence("cnn"); }
static void test_custom_loops(void) {
  test_custom_loop((run){ST_STRATEGY_MIRRORED, 2, 0, false});
  test_custom_loop((run){ST_STRATEGY_MIRRORED, 3, 0, false});
  test_custom_loop((run){ST_STRATEGY_CENTRAL_STORAGE, 2, 0, false});
  test_custom_loop((run){ST_STRATEGY_ONE_DEVICE, 1, 0, false});
}
static void test_batchnorms(void) {
  test_batchnorm(ST_STRATEGY_MIRRORED);
  test_batchnorm(ST_STRATEGY_CENTRAL_STORAGE);
}
static void test_sync_batchnorms(void) {
  test_sync_batchnorm(256, 64, 2);
  test_sync_batchnorm(20, 2, 3); /* one replica's slice is always empty */
}
static const check_case cases[] = {
    CHECK_CASE(test_pipeline_errors), CHECK_CASE(test_equivalence_mlp),
    CHECK_CASE(test_equivalence_cnn), CHECK_CASE(test_uneven_and_copies),
    CHECK_CASE(test_packs),           CHECK_CASE(test_custom_loops),
    CHECK_CASE(test_batchnorms),      CHECK_CASE(test_sync_batchnorms),
    CHECK_CASE(test_options),         CHECK_CASE(test_limits)};

int main(int argc, char **argv) {
  make_data();
  return CHECK_MAIN(argc, argv, cases);
}
