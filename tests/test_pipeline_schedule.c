/* The pipeline's schedule, measured deterministically (issue 15): every
 * stage records the order in which it ran its forward and backward passes;
 * replayed with one time unit per pass (distribute/pipeline_sched.c), the
 * idle fraction of each stage is exactly the GPipe bubble (S-1)/(M+S-1) for
 * S stages and M micro-batches, under GPipe and 1F1B, and the most
 * micro-batches a stage held at once is M under GPipe and min(S - s, M)
 * under 1F1B (its bounded activation memory). Timed bubbles are left to
 * --report and docs/BENCHMARKS.md: this machine is too noisy to assert them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "distribute/pipeline.h"
#include "fixtures.h"
#include "model/model.h"
#include "strata/strata.h"

enum { D = 6, C = 3, N = 24 };

/* Dense 8 x 4 + Dense C on D inputs, S stages x M micro-batches, one epoch
 * at batch N (one step); checks every stage's replayed figures. */
static void run(int S, int M, st_pipeline_schedule sched) {
  float x[N * D], y[N];
  fixture_argmax_data(7, N, D, C, x, y);
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_PIPELINE);
  so.pipeline_stages = S;
  so.micro_batches = M;
  so.pipeline_schedule = sched;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  for (int i = 0; i < 5; i++) {
    st_layer *l = NULL;
    CHECK_OK(st_dense(i < 4 ? 8 : C, i < 4 ? ST_ACT_RELU : ST_ACT_LINEAR, &l));
    CHECK_OK(st_model_add(m, l));
  }
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(m, &co));
  st_pipeline_stage_stats ps;
  CHECK_OK(st_strategy_pipeline_stage_stats(s, 0, &ps));
  CHECK(ps.schedule_bubble == -1.0); /* before any step */
  st_dataset *ds = fixture_dataset(x, y, N, D, N);
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  double want = (double)(S - 1) / (double)(M + S - 1);
  for (int i = 0; i < S; i++) {
    CHECK_OK(st_strategy_pipeline_stage_stats(s, i, &ps));
    CHECK(fabs(ps.schedule_bubble - want) < 1e-12);
    int cap = sched == ST_PIPELINE_GPIPE ? M : (S - i < M ? S - i : M);
    CHECK_EQ(ps.max_in_flight, cap);
    CHECK_EQ(ps.peak_rss_bytes, (size_t)0); /* one process: none */
  }
  st_model_destroy(m);
  st_strategy_destroy(s);
}

static void gpipe(void) {
  for (int S = 2; S <= 4; S++)
    for (int M = 1; M <= 8; M *= 2) run(S, M, ST_PIPELINE_GPIPE);
}

static void onef1b(void) {
  for (int S = 2; S <= 4; S++)
    for (int M = 1; M <= 8; M *= 2) run(S, M, ST_PIPELINE_1F1B);
}

/* The replay itself: a stage that waits for all forwards of the whole
 * pipeline before any backward (no overlap) is idle longer; a log that runs a
 * backward before its forward cannot be replayed. */
static void replay(void) {
  /* S = 2, M = 2. GPipe order on both stages: F0 F1 B0 B1. */
  int gp[] = {1, 2, -1, -2, 1, 2, -1, -2}, inflight[2];
  double idle[2];
  CHECK_OK(st__pipe_replay(2, 2, gp, idle, inflight));
  CHECK(fabs(idle[0] - 1.0 / 3.0) < 1e-12 && fabs(idle[1] - 1.0 / 3.0) < 1e-12);
  CHECK_EQ(inflight[0], 2);
  /* 1F1B on the last stage: F0 B0 F1 B1 (one in flight) */
  int ob[] = {1, 2, -1, -2, 1, -1, 2, -2};
  CHECK_OK(st__pipe_replay(2, 2, ob, idle, inflight));
  CHECK_EQ(inflight[1], 1);
  CHECK(fabs(idle[0] - 1.0 / 3.0) < 1e-12);
  int bad[] = {1, 2, -1, -2, -1, 1, 2, -2};
  CHECK(st__pipe_replay(2, 2, bad, idle, inflight) == ST_ERR_INTERNAL);
}

int main(int argc, char **argv) {
  static const check_case cases[] = {CHECK_CASE(gpipe), CHECK_CASE(onef1b), CHECK_CASE(replay)};
  return CHECK_MAIN(argc, argv, cases);
}
