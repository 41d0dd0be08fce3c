/* The --report JSON: one object describing the run (configuration, final
 * figures, timings, memory and per-epoch history), written atomically. */
#include <jansson.h>
#include <stdio.h>

#include "report.h"

static json_t *history_json(const st_history *h) {
  json_t *arr = json_array();
  for (int e = 0; e < h->epochs; e++) {
    const st_epoch_logs *l = &h->logs[e];
    json_t *o = json_pack("{s:i, s:f, s:f, s:f, s:f, s:I}", "epoch", l->epoch + 1, "loss", l->loss,
                          "accuracy", l->accuracy, "lr", l->lr, "seconds", l->seconds, "steps",
                          (json_int_t)l->steps);
    if (l->has_validation) {
      json_object_set_new(o, "val_loss", json_real(l->val_loss));
      json_object_set_new(o, "val_accuracy", json_real(l->val_accuracy));
    }
    json_array_append_new(arr, o);
  }
  return arr;
}

/* pipeline: {"stages": S, "stage": [{first_layer, end_layer, params,
 * peak_bytes, busy_seconds, step_seconds, bubble_fraction, peak_rss_bytes
 * (across processes), schedule_bubble, max_in_flight}, ...]}, or NULL. */
static json_t *pipeline_json(const st_strategy *s) {
  int n = st_strategy_pipeline_stages(s);
  if (n <= 0) return NULL;
  json_t *arr = json_array();
  for (int i = 0; i < n; i++) {
    st_pipeline_stage_stats ps;
    if (st_strategy_pipeline_stage_stats(s, i, &ps) != ST_OK) continue;
    json_t *o = json_pack("{s:i, s:i, s:I, s:I, s:f, s:f, s:f}", "first_layer",
                                         ps.first_layer, "end_layer", ps.end_layer, "params",
                                         (json_int_t)ps.params, "peak_bytes",
                                         (json_int_t)ps.peak_bytes, "busy_seconds",
                                         ps.busy_seconds, "step_seconds", ps.step_seconds,
                                         "bubble_fraction", ps.bubble_fraction);
    if (ps.peak_rss_bytes) /* across processes: the stage's own process */
      json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)ps.peak_rss_bytes));
    json_object_set_new(o, "schedule_bubble", json_real(ps.schedule_bubble));
    json_object_set_new(o, "max_in_flight", json_integer(ps.max_in_flight));
    json_array_append_new(arr, o);
  }
  return json_pack("{s:i, s:o}", "stages", n, "stage", arr);
}

/* st_write_file_atomic's fill: the report object o, indented. */
static int dump_json(FILE *f, void *o) {
  return json_dumpf(o, f, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
}

int report_write(const char *path, const report_info *r) {
  return report_write_extra(path, r, NULL, NULL);
}

int report_write_extra(const char *path, const report_info *r, const char *name,
                       const char *extra_json) {
  const st_history *h = r->history;
  const st_epoch_logs *last = h->epochs ? &h->logs[h->epochs - 1] : NULL;
  json_t *o = json_pack(
      "{s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:s, s:f, s:I, s:I}", "strata_version", STRATA_VERSION,
      "model", r->model, "strategy", r->strategy, "replicas", r->replicas, "epochs", h->epochs,
      "global_batch_size", r->batch, "seed", (json_int_t)r->seed, "optimizer", r->optimizer,
      "learning_rate", r->lr, "train_examples", (json_int_t)r->n_train, "validation_examples",
      (json_int_t)r->n_val);
  json_object_set_new(o, "train_loss", last ? json_real(last->loss) : json_null());
  json_object_set_new(o, "train_accuracy", last ? json_real(last->accuracy) : json_null());
  json_object_set_new(o, "test_loss", json_real(r->test.loss));
  json_object_set_new(o, "test_accuracy", json_real(r->test.accuracy));
  json_object_set_new(o, "samples_per_sec", json_real(h->samples_per_sec));
  json_object_set_new(o, "wall_seconds", json_real(r->wall_seconds));
  json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)st_peak_rss_bytes()));
  json_object_set_new(o, "history", history_json(h));
  json_t *pp = r->pipeline ? pipeline_json(r->pipeline) : NULL;
  if (pp) json_object_set_new(o, "pipeline", pp);
  if (name && extra_json) {
    json_t *x = json_loads(extra_json, 0, NULL);
    if (x) json_object_set_new(o, name, x);
  }
  st_status s = st_write_file_atomic(path, dump_json, o);
  json_decref(o);
  return s == ST_OK ? 0 : -1;
}
