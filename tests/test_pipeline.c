/* The pipeline strategy through the C API: option checks, the stage
 * partition, and the arithmetic: S stages x M micro-batches give the bytes
 * one device gives with M threads (same slices, same summation order) under
 * both schedules, with Adam (per-stage optimizer slots) and uneven or empty
 * micro-batches; per-stage figures after fit. The CLI side (mlp, cnn,
 * Dropout, BatchNormalization, save, resume, errors) is tests/test_pipeline_cli.sh. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixtures.h"
#include "model/model.h"
#include "strata/strata.h"

enum { D = 12, C = 3, N = 60 };

/* Dense 16, Dense 8, Dense 8, Dense C (relu, relu, relu, linear) on D inputs
 * under strategy so (NULL: one device, `threads` threads), compiled with
 * Adam; fitted 2 epochs at `batch`. Returns the model (caller destroys). */
static st_model *fit(st_strategy_options *so, int batch, float *x, float *y) {
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(so, &s));
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 5;
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  const int units[] = {16, 8, 8, C};
  for (int i = 0; i < 4; i++) {
    st_layer *l = NULL;
    CHECK_OK(st_dense(units[i], i < 3 ? ST_ACT_RELU : ST_ACT_LINEAR, &l));
    CHECK_OK(st_model_add(m, l));
  }
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(m, &co));
  m->owns_strategy = true;
  st_dataset *ds = fixture_dataset(x, y, N, D, batch);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 2;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  return m;
}

static void options(void) {
  st_pipeline_schedule k;
  CHECK_OK(st_pipeline_schedule_parse("1f1b", &k));
  CHECK_EQ(k, ST_PIPELINE_1F1B);
  CHECK(st_pipeline_schedule_parse("zigzag", &k) == ST_ERR_INVALID);
  CHECK_STREQ(st_strategy_kind_name(ST_STRATEGY_PIPELINE), "pipeline");
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_PIPELINE);
  st_strategy *s = NULL;
  so.stage_boundaries = "2,x";
  CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID && strstr(st_last_error(), "'x'"));
  so.stage_boundaries = "2,";
  CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID);
  so.stage_boundaries = "1,2";
  so.pipeline_stages = 2;
  CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID && strstr(st_last_error(), "agree"));
  so.pipeline_stages = 3;
  so.micro_batches = -1;
  CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID && strstr(st_last_error(), "micro"));
  so.micro_batches = 0;
  CHECK_OK(st_strategy_create(&so, &s));
  CHECK_EQ(st_strategy_pipeline_stages(s), 0); /* not bound to a model yet */
  st_pipeline_stage_stats ps;
  CHECK(st_strategy_pipeline_stage_stats(s, 0, &ps) == ST_ERR_INVALID);
  st_strategy_destroy(s);
}

/* Compile fails (ST_ERR_INVALID) for a partition the model cannot take. */
static void bad_partition(void) {
  const char *bounds[] = {"4", "2,2", "0"};
  for (int i = 0; i < 3; i++) {
    st_strategy_options so = st_strategy_default_options(ST_STRATEGY_PIPELINE);
    so.stage_boundaries = bounds[i];
    st_strategy *s = NULL;
    CHECK_OK(st_strategy_create(&so, &s));
    st_model_options mo = st_model_default_options(st_shape1(D));
    mo.strategy = s;
    st_model *m = NULL;
    CHECK_OK(st_sequential_create(&mo, &m));
    for (int j = 0; j < 4; j++) {
      st_layer *l = NULL;
      CHECK_OK(st_dense(4, ST_ACT_RELU, &l));
      CHECK_OK(st_model_add(m, l));
    }
    st_compile_options co = st_compile_default_options();
    CHECK(st_model_compile(m, &co) == ST_ERR_INVALID &&
          strstr(st_last_error(), "is not a layer index"));
    st_model_destroy(m);
    st_strategy_destroy(s);
  }
}

/* Pipeline weights == one device with M threads, byte for byte. */
static void check_equal(int stages, const char *bounds, int M, st_pipeline_schedule sched,
                        int batch) {
  float x[N * D], y[N];
  fixture_argmax_data(3, N, D, C, x, y);
  st_strategy_options od = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  od.threads = M;
  st_model *a = fit(&od, batch, x, y);
  st_strategy_options pp = st_strategy_default_options(ST_STRATEGY_PIPELINE);
  pp.pipeline_stages = stages;
  pp.stage_boundaries = bounds;
  pp.micro_batches = M;
  pp.pipeline_schedule = sched;
  st_model *b = fit(&pp, batch, x, y);
  CHECK_EQ(a->net.n_params, b->net.n_params);
  CHECK(memcmp(a->net.params, b->net.params, a->net.n_params * sizeof(float)) == 0);
  for (int k = 0; k < a->net.n_slots; k++)
    CHECK(memcmp(a->net.slots[k], b->net.slots[k], a->net.n_params * sizeof(float)) == 0);
  CHECK_EQ(a->net.step, b->net.step);
  /* per-stage figures: contiguous layers, every variable once, plausible times */
  int S = st_strategy_pipeline_stages(b->strategy), next = 0;
  int64_t params = 0;
  CHECK_EQ(S, stages);
  for (int i = 0; i < S; i++) {
    st_pipeline_stage_stats ps;
    CHECK_OK(st_strategy_pipeline_stage_stats(b->strategy, i, &ps));
    CHECK_EQ(ps.first_layer, next);
    CHECK_GT(ps.end_layer, ps.first_layer);
    next = ps.end_layer;
    params += ps.params;
    CHECK_GE(ps.peak_bytes, (size_t)ps.params * sizeof(float) * 3); /* w, m, v at least */
    CHECK(ps.busy_seconds > 0 && ps.busy_seconds <= ps.step_seconds);
    CHECK(ps.bubble_fraction >= 0 && ps.bubble_fraction < 1);
  }
  CHECK_EQ(next, 4);
  CHECK_EQ(params, (int64_t)b->net.n_params);
  st_model_destroy(a);
  st_model_destroy(b);
}

static void gpipe_two_stages(void) { check_equal(2, NULL, 4, ST_PIPELINE_GPIPE, 10); }
static void onef1b_three_stages(void) { check_equal(3, "1,3", 4, ST_PIPELINE_1F1B, 10); }
static void four_stages_more_microbatches(void) { check_equal(4, NULL, 6, ST_PIPELINE_1F1B, 20); }
/* batch 3 over 4 micro-batches: the last one is empty */
static void empty_microbatch(void) { check_equal(2, "2", 4, ST_PIPELINE_GPIPE, 3); }

int main(int argc, char **argv) {
  static const check_case cases[] = {
      CHECK_CASE(options),          CHECK_CASE(bad_partition),
      CHECK_CASE(gpipe_two_stages), CHECK_CASE(onef1b_three_stages),
      CHECK_CASE(four_stages_more_microbatches), CHECK_CASE(empty_microbatch),
  };
  return CHECK_MAIN(argc, argv, cases);
}
