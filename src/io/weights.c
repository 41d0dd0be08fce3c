/* save_weights / load_weights as safetensors: one F32 tensor per variable,
 * named "<layer>/<param>" with the Keras layout (Dense kernel [in, units],
 * Conv2D kernel [kh, kw, in, filters], BatchNormalization gamma, beta,
 * moving_mean, moving_variance). Loading checks every name and shape before
 * changing any variable, so a wrong file leaves the model as it was. Also the
 * variables as one flat host array (get_weights / set_weights). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distribute/strategy.h"
#include "io/checkpoint.h"
#include "model/model.h"

int st__model_var_count(const st_model *m) {
  int n = 0;
  for (int i = 0; i < m->net.nlayers; i++) n += m->net.layers[i]->nparams;
  return n;
}

void st__describe_var(const st_layer *l, int p, st_named_tensor *t) {
  snprintf(t->name, sizeof t->name, "%s/%s", l->name, l->params[p].name);
  t->rank = l->params[p].shape.rank;
  for (int d = 0; d < t->rank; d++) t->dims[d] = l->params[p].shape.dims[d];
}

static bool in_tie(const st_net *n, const st_layer *l, int p) {
  size_t off = l->params[p].offset;
  return l->params[p].trainable && n->tie_np && off >= n->tie_p && off - n->tie_p < n->tie_np;
}

bool st__var_is_local(const st_net *n, const st_layer *l, int p) {
  if (!n->reserved) return true;
  size_t off = l->params[p].offset;
  if (in_tie(n, l, p)) return true;
  return l->params[p].trainable ? off >= n->own_p && off - n->own_p < n->own_np
                                : off >= n->own_s && off - n->own_s < n->own_ns;
}

bool st__slots_are_local(const st_net *n, const st_layer *l, int p) {
  if (n->reserved && in_tie(n, l, p)) return n->tie_slots;
  return st__var_is_local(n, l, p);
}

/* m (compiled, strategy alive) and path of the weights functions. */
static st_status check_path_args(const st_model *m, const char *path, const char *fn) {
  st_status s = st__model_check(m, fn, true);
  if (s != ST_OK) return s;
  if (!path) return st_error(ST_ERR_INVALID, "%s: path is NULL", fn);
  if (!path[0]) return st_error(ST_ERR_INVALID, "%s: path is empty", fn);
  return ST_OK;
}

/* save's fetch: tensor k is parameter param[k] of layer layer[k]. */
typedef struct streamed {
  const st_model *m;
  int *layer, *param;
  float *buf;
} streamed;

static st_status fetch_var(void *arg, int k, const float **data) {
  streamed *x = arg;
  return st__vars_read(x->m->strategy, (st_net *)&x->m->net, x->layer[k], x->param[k], -1,
                       x->buf, data);
}

/* The file written tensor by tensor, each read through the variable
 * placement (distribute/placement.h): from the net's buffers, or (a pipeline
 * across processes, the chief) as it arrives from its stage. */
static st_status save(const st_model *m, const char *path) {
  int n = st__model_var_count(m), k = 0;
  size_t big = 1;
  streamed x = {m, malloc(sizeof(int) * (size_t)(n + 1)), malloc(sizeof(int) * (size_t)(n + 1)), NULL};
  st_named_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
  for (int i = 0; i < m->net.nlayers && ts && x.layer && x.param; i++)
    for (int p = 0; p < m->net.layers[i]->nparams; p++, k++) {
      st__describe_var(m->net.layers[i], p, &ts[k]);
      x.layer[k] = i, x.param[k] = p;
      size_t sz = st_shape_size(m->net.layers[i]->params[p].shape);
      if (sz > big) big = sz;
    }
  x.buf = malloc(big * sizeof(float));
  st_status s = ST_OK;
  if (!ts || !x.layer || !x.param || !x.buf) s = st_error(ST_ERR_NOMEM, "save_weights: out of memory");
  const char *keys[] = {"format", "model"};
  const char *vals[] = {"strata", m->name};
  st__vars_begin(m->strategy, (st_net *)&m->net, false);
  if (s == ST_OK) s = st__safetensors_write_fetch(path, ts, n, keys, vals, 2, fetch_var, &x);
  st__vars_end(m->strategy, (st_net *)&m->net, s); /* a failure stops the stages */
  free(ts), free(x.layer), free(x.param), free(x.buf);
  return s;
}

st_status st_model_save_weights(const st_model *m, const char *path) {
  st_status s = check_path_args(m, path, "st_model_save_weights");
  if (s == ST_OK) s = st__strategy_reentry(m->strategy, "st_model_save_weights", true);
  bool served = false; /* a pipeline stage across processes streams to the chief */
  if (s == ST_OK) s = st__vars_serve(m->strategy, (st_net *)&m->net, false, &served);
  return s != ST_OK || served ? s : save(m, path);
}

static const char *dims_str(const st_named_tensor *t, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < t->rank && o < n; d++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
  if (o < n) snprintf(buf + o, n - o, "]");
  return buf;
}

st_status st__check_tensor(const char *path, const st_named_tensor *want,
                              const st_named_tensor *got) {
  if (!got)
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s' is missing", path, want->name);
  bool same = got->rank == want->rank;
  for (int d = 0; same && d < want->rank; d++) same = got->dims[d] == want->dims[d];
  char a[128], b[128];
  if (!same)
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s' has shape %s, the model expects %s", path,
                    want->name, dims_str(got, a, sizeof a), dims_str(want, b, sizeof b));
  return ST_OK;
}

/* Before compile: the variables wait on the host in m->pending_vars. */
static st_status keep_pending(st_model *m, const st_safetensors *f) {
  size_t total = m->net.n_params + m->net.n_state;
  float *hp = calloc(total + 1, sizeof *hp);
  if (!hp) return st_error(ST_ERR_NOMEM, "st_model_load_weights: out of memory");
  for (int i = 0; i < m->net.nlayers; i++)
    for (int p = 0; p < m->net.layers[i]->nparams; p++) {
      const st_layer *l = m->net.layers[i];
      st_named_tensor want;
      st__describe_var(l, p, &want);
      memcpy(st__var_ptr(l, p, hp, hp + m->net.n_params),
             st__safetensors_find(f, want.name)->data,
             st_shape_size(l->params[p].shape) * sizeof(float));
    }
  free(m->pending_vars);
  m->pending_vars = hp;
  return ST_OK;
}

/* The variables of f (names and shapes checked), read from path into the
 * model: a pipeline stage across processes (st_net.reserved, f a header)
 * reads only its own, straight into its share; nothing else becomes memory. */
static st_status apply_loaded(st_model *m, const char *path, const st_safetensors *f) {
  st_net *n = &m->net;
  st_status s = ST_OK;
  for (int i = 0; s == ST_OK && i < n->nlayers; i++)
    for (int p = 0; s == ST_OK && p < n->layers[i]->nparams; p++) {
      const st_layer *l = n->layers[i];
      st_named_tensor want;
      st__describe_var(l, p, &want);
      const st_named_tensor *got = st__safetensors_find(f, want.name);
      float *dst = st__var_ptr(l, p, n->params, n->state);
      if (n->reserved && st__var_is_local(n, l, p))
        s = st__safetensors_read_tensor(path, f, (int)(got - f->tensors), dst);
      else if (!n->reserved)
        st__be_to_device(n->be_ctx, dst, got->data, st_shape_size(l->params[p].shape) * sizeof(float));
    }
  return s;
}

st_status st_model_load_weights(st_model *m, const char *path) {
  st_status s = st__model_check(m, "st_model_load_weights", false);
  if (s == ST_OK) s = st__strategy_reentry(m->strategy, "st_model_load_weights", true);
  if (s == ST_OK && m->compiled) s = check_path_args(m, path, "st_model_load_weights");
  else if (s == ST_OK && (!path || !path[0]))
    s = st_error(ST_ERR_INVALID, "st_model_load_weights: path is %s", path ? "empty" : "NULL");
  else if (s == ST_OK && m->add_error[0])
    s = st_error(ST_ERR_INVALID, "st_model_load_weights: %s", m->add_error);
  if (s != ST_OK) return s;
  st_safetensors f;
  bool local = m->compiled && m->net.reserved; /* a pipeline stage: its tensors only */
  s = local ? st__safetensors_read_header(path, &f) : st__safetensors_read(path, &f);
  if (s != ST_OK) return s;
  int n = st__model_var_count(m);
  if (f.n != n)
    s = st_error(ST_ERR_FORMAT, "%s: %d tensors, the model has %d variables", path, f.n, n);
  for (int i = 0; s == ST_OK && i < m->net.nlayers; i++)
    for (int p = 0; s == ST_OK && p < m->net.layers[i]->nparams; p++) {
      st_named_tensor want;
      st__describe_var(m->net.layers[i], p, &want);
      s = st__check_tensor(path, &want, st__safetensors_find(&f, want.name));
    }
  if (s == ST_OK && !m->compiled) {
    s = keep_pending(m, &f);
    st__safetensors_free(&f);
    return s;
  }
  if (s == ST_OK) s = apply_loaded(m, path, &f);
  if (s == ST_OK) st__vars_publish(m->strategy, &m->net);
  st__safetensors_free(&f);
  return s;
}

size_t st_model_weights_size(const st_model *m) {
  return m ? m->net.n_params + m->net.n_state : 0;
}

st_status st_model_get_weights(const st_model *m, float *out) {
  st_status s = st__model_check(m, "st_model_get_weights", true);
  if (s != ST_OK) return s;
  if (!out) return st_error(ST_ERR_INVALID, "st_model_get_weights: out is NULL");
  if ((s = st__vars_gather(m->strategy, (st_net *)&m->net)) != ST_OK) return s;
  st__be_to_host(m->net.be_ctx, out, m->net.params, m->net.n_params * sizeof(float));
  st__be_to_host(m->net.be_ctx, out + m->net.n_params, m->net.state, m->net.n_state * sizeof(float));
  return ST_OK;
}

st_status st_model_set_weights(st_model *m, const float *in) {
  st_status s = st__model_check(m, "st_model_set_weights", true);
  if (s == ST_OK) s = st__strategy_reentry(m->strategy, "st_model_set_weights", true);
  if (s != ST_OK) return s;
  if (!in) return st_error(ST_ERR_INVALID, "st_model_set_weights: in is NULL");
  if ((s = st__vars_expose(m->strategy, &m->net)) != ST_OK) return s;
  st__be_to_device(m->net.be_ctx, m->net.params, in, m->net.n_params * sizeof(float));
  st__be_to_device(m->net.be_ctx, m->net.state, in + m->net.n_params, m->net.n_state * sizeof(float));
  st__vars_publish(m->strategy, &m->net);
  return ST_OK;
}
