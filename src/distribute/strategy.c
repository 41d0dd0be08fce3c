/* Strategy registry: names, default options, creation and the pieces every
 * strategy shares. */
#include "distribute/strategy.h"

#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
    "one_device", "mirrored", "central_storage", "multi_worker_mirrored",
    "parameter_server"};
_Static_assert(sizeof kind_names / sizeof *kind_names == ST_STRATEGY_COUNT,
               "one name per strategy kind");

const char *st_strategy_kind_name(st_strategy_kind k) {
  return (k >= 0 && k < ST_STRATEGY_COUNT) ? kind_names[k] : "unknown";
}

st_status st_strategy_kind_parse(const char *name, st_strategy_kind *out) {
  for (int k = 0; k < ST_STRATEGY_COUNT; k++)
    if (strcmp(name, kind_names[k]) == 0) {
      *out = (st_strategy_kind)k;
      return ST_OK;
    }
  return st_error(ST_ERR_INVALID,
                  "unknown strategy '%s' (expected one_device, mirrored, "
                  "central_storage, multi_worker_mirrored or parameter_server)",
                  name);
}

st_strategy_options st_strategy_default_options(st_strategy_kind kind) {
  st_strategy_options o;
  memset(&o, 0, sizeof o);
  o.kind = kind;
  return o;
}

static st_status check_device(const char *dev) {
  if (!dev || strcmp(dev, "cpu:0") == 0 || strcmp(dev, "cpu") == 0) return ST_OK;
  if (strncmp(dev, "gpu", 3) == 0 || strncmp(dev, "cuda", 4) == 0)
    return st_error(ST_ERR_NOT_BUILT, "device '%s': this build has no GPU backend", dev);
  return st_error(ST_ERR_INVALID, "device '%s': expected cpu:0", dev);
}

st_status st_strategy_create(const st_strategy_options *o, st_strategy **out) {
  *out = NULL;
  const st_strategy_vtable *vt = NULL;
  switch (o->kind) {
    case ST_STRATEGY_ONE_DEVICE: vt = &st__one_device_vtable; break;
    case ST_STRATEGY_MIRRORED:
    case ST_STRATEGY_CENTRAL_STORAGE:
    case ST_STRATEGY_MULTI_WORKER_MIRRORED:
    case ST_STRATEGY_PARAMETER_SERVER:
      return st_error(ST_ERR_NOT_BUILT,
                      "strategy '%s' is not available in this version of Strata "
                      "(only one_device is)", st_strategy_kind_name(o->kind));
    default:
      return st_error(ST_ERR_INVALID, "strategy kind %d out of range", (int)o->kind);
  }
  st_status s = check_device(o->device);
  if (s != ST_OK) return s;
  if (o->threads < 0)
    return st_error(ST_ERR_INVALID, "strategy: threads %d (must be >= 0)", o->threads);
  st_strategy *st = calloc(1, sizeof *st);
  if (!st) return st_error(ST_ERR_NOMEM, "strategy: out of memory");
  st->vt = vt;
  st->opts = *o;
  st->opts.device = NULL; /* not retained: the caller owns the strings */
  st->opts.devices = NULL;
  st->num_replicas = 1;
  *out = st;
  return ST_OK;
}

void st_strategy_destroy(st_strategy *s) {
  if (!s) return;
  if (s->model) s->vt->detach(s);
  free(s);
}

st_strategy_kind st_strategy_kind_of(const st_strategy *s) { return s->opts.kind; }
int st_strategy_num_replicas_in_sync(const st_strategy *s) { return s->num_replicas; }

void st__step_metrics(const st_model *m, const float *pred, const float *y,
                      int rows, st_step_stats *out) {
  if (rows <= 0 || m->compile.nmetrics == 0) return;
  int cols = (int)st__model_output_size(m);
  st_metric_kind k = m->compile.metrics[0];
  out->correct += st_metric_correct(k, m->compile.loss, rows, cols, pred, y);
  bool binary = k == ST_METRIC_BINARY_ACCURACY ||
                (k == ST_METRIC_ACCURACY && (m->compile.loss == ST_LOSS_BCE ||
                                             m->compile.loss == ST_LOSS_BCE_LOGITS));
  out->metric_count += binary ? (int64_t)rows * cols : rows;
}
