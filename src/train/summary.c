/* model.summary(): the Keras table of layers, output shapes and parameter
 * counts, returned as a string (the caller prints it). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

typedef struct sbuf {
  char *s;
  size_t len, cap;
  bool failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->failed) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || b->len + (size_t)n + 1 > b->cap) {
    size_t cap = (b->cap + (size_t)(n > 0 ? n : 0) + 1) * 2;
    char *g = realloc(b->s, cap);
    if (!g || n < 0) { b->failed = true; return; }
    b->s = g;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* 225034 -> "225,034" */
static const char *grouped(size_t v, char *buf) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%zu", v), o = 0;
  for (int i = 0; i < n; i++) {
    if (i && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = tmp[i];
  }
  buf[o] = 0;
  return buf;
}

/* Tensor t as Keras's summary names it: "dense_1[0][0]" (the layer, which of
 * its calls made it), "input_1[0][0]" for a model input. */
static void tensor_name(const st_model *m, int t, char *buf, size_t n) {
  if (t < 0) {
    snprintf(buf, n, "%s[0][0]", m->input_nodes[-1 - t]->name);
    return;
  }
  int layer = m->net.nodes[t].layer, call = 0;
  for (int k = 0; k < t; k++) call += m->net.nodes[k].layer == layer;
  snprintf(buf, n, "%s[%d][0]", m->net.layers[layer]->name, call);
}

/* The "Connected to" cell of layer i: every input of each of its calls. */
static void connected_to(const st_model *m, int i, sbuf *b) {
  sb_printf(b, "[");
  int written = 0;
  for (int k = 0; k < m->net.nnodes; k++) {
    if (m->net.nodes[k].layer != i) continue;
    for (int j = 0; j < m->net.nodes[k].n_in; j++) {
      char name[ST_NAME_MAX + 24];
      tensor_name(m, m->net.nodes[k].in[j], name, sizeof name);
      sb_printf(b, "%s'%s'", written++ ? ", " : "", name);
    }
  }
  sb_printf(b, "]\n");
}

/* Keras's functional summary: InputLayer rows, then a row per layer with
 * what it reads. */
static void functional_rows(const st_model *m, sbuf *b, const char *dbl) {
  char nm[160], shp[64];
  for (int j = 0; j < m->net.n_inputs; j++) {
    snprintf(nm, sizeof nm, "%s (InputLayer)", m->input_nodes[j]->name);
    sb_printf(b, " %-33s %-24s %-10d []\n\n", nm,
              st_shape_format(m->net.inputs[j], shp, sizeof shp), 0);
  }
  for (int i = 0; i < m->net.nlayers; i++) {
    const st_layer *l = m->net.layers[i];
    snprintf(nm, sizeof nm, "%s (%s)", l->name, l->vt->class_name);
    sb_printf(b, " %-33s %-24s %-10zu ", nm, st_shape_format(l->out_shape, shp, sizeof shp),
              st_layer_param_count(l));
    connected_to(m, i, b);
    sb_printf(b, "%s\n", i + 1 < m->net.nlayers ? "" : dbl);
  }
}

st_status st_model_summary(const st_model *m, char **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_model_summary: out is NULL");
  *out = NULL;
  if (!m) return st_error(ST_ERR_INVALID, "st_model_summary: m is NULL");
  sbuf b = {0};
  const char *rule = "______________________________________________________________________";
  const char *dbl = "======================================================================";
  const char *wide_rule = "__________________________________________________________________"
                          "________________________________";
  const char *wide_dbl = "=================================================================="
                         "================================";
  sb_printf(&b, "Model: \"%s\"\n%s\n", m->name, m->functional ? wide_rule : rule);
  if (m->functional)
    sb_printf(&b, " %-33s %-24s %-10s %s\n%s\n", "Layer (type)", "Output Shape", "Param #",
              "Connected to", wide_dbl);
  else
    sb_printf(&b, " %-33s %-24s %s\n%s\n", "Layer (type)", "Output Shape", "Param #", dbl);
  if (m->functional) functional_rows(m, &b, wide_dbl);
  size_t trainable = 0, total = 0;
  for (int i = 0; i < m->net.nlayers; i++) {
    const st_layer *l = m->net.layers[i];
    char nm[160], shp[64];
    snprintf(nm, sizeof nm, "%s (%s)", l->name, l->vt->class_name);
    size_t n = st_layer_param_count(l);
    for (int p = 0; p < l->nparams; p++)
      if (l->params[p].trainable) trainable += st_shape_size(l->params[p].shape);
    total += n;
    if (m->functional) continue;
    sb_printf(&b, " %-33s %-24s %zu\n", nm, st_shape_format(l->out_shape, shp, sizeof shp), n);
    sb_printf(&b, "%s\n", i + 1 < m->net.nlayers ? "" : dbl);
  }
  char g[48];
  sb_printf(&b, "Total params: %s\n", grouped(total, g));
  sb_printf(&b, "Trainable params: %s\n", grouped(trainable, g));
  sb_printf(&b, "Non-trainable params: %s\n%s\n", grouped(total - trainable, g),
            m->functional ? wide_rule : rule);
  if (b.failed) {
    free(b.s);
    return st_error(ST_ERR_NOMEM, "summary: out of memory");
  }
  *out = b.s;
  return ST_OK;
}
