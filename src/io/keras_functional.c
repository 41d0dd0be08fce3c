/* Keras functional models (class_name "Functional", or "Model" in older
 * Keras 2 files): every layer entry carries its calls in "inbound_nodes" —
 * Keras 2: a list per call of [layer, node_index, tensor_index, kwargs]
 * entries; Keras 3: {"args": [...], "kwargs": {...}} with "__keras_tensor__"
 * values whose keras_history is [layer, node_index, tensor_index]. The calls
 * are replayed with st_layer_call in dependency order (a shared layer's
 * second call may wait for later layers); "input_layers"/"output_layers"
 * give the model's inputs and output. Errors are ST_ERR_FORMAT naming the
 * file, layer and call. Any thread (state is per call). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/keras.h"
#include "nn/net.h" /* ST_NET_MAX_IO */
#include "strata/train.h"

/* One layer entry: its validated config, its calls and what they made. */
typedef struct fn_layer {
  st__keras_layer k;
  const json_t *calls;   /* the inbound_nodes array */
  int ncalls, done;      /* calls listed, calls made so far */
  st_layer *layer;       /* made on its first call; NULL for InputLayer */
  st_node *input;        /* InputLayer: its tensor */
  st_node **out;         /* [ncalls]: each call's output */
} fn_layer;

typedef struct fn_graph {
  const st__keras_ctx *c;
  fn_layer *l;
  int n;
} fn_graph;

static int find(const fn_graph *g, const char *name) {
  for (int i = 0; name && i < g->n; i++)
    if (strcmp(g->l[i].k.name, name) == 0) return i;
  return -1;
}

static void entry_ctx(const fn_graph *g, int i, st__keras_ctx *out) {
  *out = *g->c;
  out->index = i;
  snprintf(out->cls, sizeof out->cls, "%s", g->l[i].k.cls ? g->l[i].k.cls : "?");
  snprintf(out->name, sizeof out->name, "%s", g->l[i].k.name);
}

/* A reference [layer, node_index, tensor_index(, kwargs)] to its tensor:
 * *t the tensor, or NULL while the call that makes it has not run. */
static st_status ref(const fn_graph *g, const st__keras_ctx *c, const json_t *r, st_node **t) {
  char b[96];
  *t = NULL;
  const char *name = json_string_value(json_array_get(r, 0));
  const json_t *node = json_array_get(r, 1), *tensor = json_array_get(r, 2);
  if (!json_is_array(r) || json_array_size(r) < 3 || !name || !json_is_integer(node) ||
      !json_is_integer(tensor))
    return st__keras_error(c, "inbound tensor %s is not [layer, node_index, tensor_index]",
                           st__keras_show(r, b, sizeof b));
  int i = find(g, name);
  if (i < 0)
    return st__keras_error(c, "inbound tensor refers to layer '%s', which the model does not "
                           "have", st__keras_clean(name, b, sizeof b));
  const fn_layer *src = &g->l[i];
  long long ni = json_integer_value(node), ti = json_integer_value(tensor);
  int ncalls = src->k.kind == ST__K_INPUT ? 1 : src->ncalls;
  if (ni < 0 || ni >= ncalls || ti != 0)
    return st__keras_error(c, "inbound tensor [%s, %lld, %lld]: layer '%s' has %d call%s and "
                           "one output", src->k.name, ni, ti, src->k.name, ncalls,
                           ncalls == 1 ? "" : "s");
  *t = src->k.kind == ST__K_INPUT ? src->input : (ni < src->done ? src->out[ni] : NULL);
  return ST_OK;
}

/* A Keras 3 "__keras_tensor__" value's keras_history. */
static const json_t *history(const json_t *v) {
  const char *cls = json_string_value(json_object_get(v, "class_name"));
  if (!cls || strcmp(cls, "__keras_tensor__") != 0) return NULL;
  return json_object_get(json_object_get(v, "config"), "keras_history");
}

/* The call's arguments, collected: tensors in call order (query, value, key
 * for attention) and the flags it passes. */
typedef struct call_args {
  st_node *in[ST_LAYER_MAX_INPUTS];
  int n;
  bool waiting;         /* an input's call has not run yet */
  bool causal;          /* use_causal_mask=True */
} call_args;

static st_status push(const fn_graph *g, const st__keras_ctx *c, const json_t *r, call_args *a) {
  if (a->n == ST_LAYER_MAX_INPUTS)
    return st__keras_error(c, "a call with more than %d inputs", ST_LAYER_MAX_INPUTS);
  st_node *t;
  st_status s = ref(g, c, r, &t);
  if (s != ST_OK) return s;
  if (!t) a->waiting = true;
  a->in[a->n++] = t;
  return ST_OK;
}

/* Call keyword arguments both formats share: value/key tensors (attention),
 * use_causal_mask, and the harmless training/mask=None. */
static st_status kwargs(const fn_graph *g, const st__keras_ctx *c, const json_t *kw, bool k3,
                        call_args *a) {
  const char *key;
  json_t *v;
  char b[64];
  const json_t *value = json_object_get(kw, "value"), *keyt = json_object_get(kw, "key");
  if (value) {
    st_status s = push(g, c, k3 ? history(value) : value, a);
    if (s != ST_OK) return s;
  }
  if (keyt && !json_is_null(keyt)) {
    st_status s = push(g, c, k3 ? history(keyt) : keyt, a);
    if (s != ST_OK) return s;
  }
  json_object_foreach((json_t *)kw, key, v) {
    if (!strcmp(key, "value") || !strcmp(key, "key")) continue;
    if (!strcmp(key, "use_causal_mask") && json_is_boolean(v)) {
      a->causal = json_is_true(v);
      continue;
    }
    if ((!strcmp(key, "training") || !strcmp(key, "mask") || !strcmp(key, "attention_mask") ||
         !strcmp(key, "return_attention_scores")) && (json_is_null(v) || json_is_false(v)))
      continue;
    return st__keras_error(c, "call argument %s=%s is not supported",
                           st__keras_clean(key, b, sizeof b), st__keras_show(v, b + 32, 32));
  }
  return ST_OK;
}

/* Keras 2: [[name, node, tensor, kwargs], ...]; Keras 3: {"args", "kwargs"}. */
static st_status call_inputs(const fn_graph *g, const st__keras_ctx *c, const json_t *call,
                             call_args *a) {
  char b[96];
  memset(a, 0, sizeof *a);
  st_status s = ST_OK;
  if (json_is_array(call)) {
    for (size_t i = 0; s == ST_OK && i < json_array_size(call); i++) {
      const json_t *r = json_array_get(call, i), *kw = json_array_get(r, 3);
      s = push(g, c, r, a);
      if (s == ST_OK && kw && !json_is_object(kw))
        s = st__keras_error(c, "inbound kwargs %s is not an object", st__keras_show(kw, b, 64));
      if (s == ST_OK && kw) s = kwargs(g, c, kw, false, a);
    }
    return s;
  }
  const json_t *args = json_object_get(call, "args"), *kw = json_object_get(call, "kwargs");
  if (!json_is_object(call) || !json_is_array(args) || (kw && !json_is_object(kw)))
    return st__keras_error(c, "inbound node %s is neither a Keras 2 list nor a Keras 3 "
                           "{\"args\", \"kwargs\"} object", st__keras_show(call, b, sizeof b));
  for (size_t i = 0; s == ST_OK && i < json_array_size(args); i++) {
    const json_t *v = json_array_get(args, i);
    if (json_is_array(v)) /* Add([a, b]): one list argument */
      for (size_t j = 0; s == ST_OK && j < json_array_size(v); j++)
        s = history(json_array_get(v, j)) ? push(g, c, history(json_array_get(v, j)), a)
                                           : st__keras_error(c, "call argument %s is not a "
                                                             "tensor", st__keras_show(v, b, 96));
    else if (history(v))
      s = push(g, c, history(v), a);
    else
      s = st__keras_error(c, "call argument %s is not a tensor", st__keras_show(v, b, 96));
  }
  if (s == ST_OK && kw) s = kwargs(g, c, kw, true, a);
  return s;
}

/* The tied head (ReversibleEmbedding) of entry f: its Embedding, by name,
 * must be made already (called earlier in the data flow). */
static st_status make_tied(const fn_graph *g, const st__keras_ctx *c, fn_layer *f) {
  int t = find(g, f->k.tied);
  if (t < 0 || !g->l[t].layer)
    return st__keras_error(c, "its Embedding '%s' %s", f->k.tied,
                           t < 0 ? "is not a layer of the model" : "is not called before it");
  if (st_reversible_embedding(g->l[t].layer, &f->layer) != ST_OK) return st__keras_rethrow(c);
  if (f->k.name[0]) {
    snprintf(f->layer->name, sizeof f->layer->name, "%s", f->k.name);
    f->layer->named_by_user = true;
  }
  return ST_OK;
}

/* Call `call` of layer i once its inputs exist (*made false while waiting):
 * the layer is made on its first call, for its inputs' shapes. */
static st_status run_call(fn_graph *g, int i, bool *made) {
  fn_layer *f = &g->l[i];
  st__keras_ctx c;
  entry_ctx(g, i, &c);
  call_args a;
  *made = false;
  st_status s = call_inputs(g, &c, json_array_get(f->calls, (size_t)f->done), &a);
  if (s != ST_OK || a.waiting) return s;
  if (a.n == 0) return st__keras_error(&c, "call %d has no input tensor", f->done);
  if (!f->layer && f->k.kind == ST__K_REVERSIBLE_EMBEDDING) {
    if ((s = make_tied(g, &c, f)) != ST_OK) return s;
  } else if (!f->layer) {
    f->k.causal_mask = a.causal;
    if ((s = st__keras_make_layer(&c, &f->k, a.in[0]->shape, &f->layer)) != ST_OK) return s;
  } else if (a.causal != f->k.causal_mask) {
    return st__keras_error(&c, "its calls differ in use_causal_mask (not supported)");
  }
  st_node *out = NULL;
  if (st_layer_call(f->layer, a.in, a.n, &out) != ST_OK) return st__keras_rethrow(&c);
  f->out[f->done++] = out;
  *made = true;
  return ST_OK;
}

/* Replays every call: passes over the layers until all ran; a pass that
 * makes no call means a cycle (or a reference to a call never made). */
static st_status run_calls(fn_graph *g) {
  for (;;) {
    bool progress = false, left = false;
    for (int i = 0; i < g->n; i++) {
      fn_layer *f = &g->l[i];
      while (f->k.kind != ST__K_INPUT && f->done < f->ncalls) {
        bool made;
        st_status s = run_call(g, i, &made);
        if (s != ST_OK) return s;
        if (!made) break;
        progress = true;
      }
      left |= f->k.kind != ST__K_INPUT && f->done < f->ncalls;
    }
    if (!left) return ST_OK;
    if (progress) continue;
    for (int i = 0; i < g->n; i++)
      if (g->l[i].k.kind != ST__K_INPUT && g->l[i].done < g->l[i].ncalls) {
        st__keras_ctx c;
        entry_ctx(g, i, &c);
        return st__keras_error(&c, "call %d waits for a tensor that depends on itself: the "
                               "graph has a cycle", g->l[i].done);
      }
  }
}

/* Layer entry i: its config (without inbound_nodes) and its calls. */
static st_status parse_entry(fn_graph *g, int i, const json_t *e) {
  st__keras_ctx c = *g->c;
  c.index = i;
  fn_layer *f = &g->l[i];
  const json_t *calls = json_object_get(e, "inbound_nodes");
  json_t *copy = json_is_object(e) ? json_copy((json_t *)e) : NULL;
  if (copy) json_object_del(copy, "inbound_nodes");
  st_status s = st__keras_parse_layer(&c, copy ? copy : e, &f->k);
  json_decref(copy);
  if (s != ST_OK) return s;
  entry_ctx(g, i, &c);
  const char *ename = json_string_value(json_object_get(e, "name"));
  if (!f->k.name[0] && ename && strlen(ename) < ST_NAME_MAX)
    snprintf(f->k.name, sizeof f->k.name, "%s", ename);
  if (!f->k.name[0]) return st__keras_error(&c, "a functional model's layer needs a name");
  if (find(g, f->k.name) < i) return st__keras_error(&c, "duplicate layer name");
  if (!json_is_array(calls))
    return st__keras_error(&c, "inbound_nodes is missing or not a list");
  f->calls = calls;
  f->ncalls = (int)json_array_size(calls);
  if (f->k.kind == ST__K_INPUT) {
    if (f->ncalls) return st__keras_error(&c, "an InputLayer has no inbound nodes");
    if (!f->k.has_input) return st__keras_error(&c, "InputLayer without batch_shape");
    if (st_input(f->k.input, f->k.name, &f->input) != ST_OK) return st__keras_rethrow(&c);
    return ST_OK;
  }
  if (f->ncalls == 0 || f->ncalls > ST__KERAS_MAX_LAYERS)
    return st__keras_error(&c, "%d inbound nodes (a layer the model does not call?)", f->ncalls);
  f->out = calloc((size_t)f->ncalls, sizeof *f->out);
  return f->out ? ST_OK : st_error(ST_ERR_NOMEM, "%s: out of memory", c.file);
}

/* input_layers / output_layers: [[name, node, tensor], ...], or one flat
 * [name, node, tensor] (Keras 3 with one input or output). */
static st_status ends(const fn_graph *g, const json_t *cfg, const char *key, st_node **t,
                      int *n) {
  char b[96];
  const json_t *v = json_object_get(cfg, key);
  bool flat = json_is_array(v) && json_is_string(json_array_get(v, 0));
  size_t count = flat ? 1 : json_array_size(v);
  if (!json_is_array(v) || count == 0 || count > ST_NET_MAX_IO)
    return st__keras_error(g->c, "config.%s %s is missing or not a list of 1..%d tensors", key,
                           st__keras_show(v, b, sizeof b), ST_NET_MAX_IO);
  for (size_t i = 0; i < count; i++) {
    st_status s = ref(g, g->c, flat ? v : json_array_get(v, i), &t[i]);
    if (s != ST_OK) return s;
  }
  *n = (int)count;
  return ST_OK;
}

static void free_graph(fn_graph *g) {
  for (int i = 0; i < g->n; i++) {
    st_layer_destroy(g->l[i].layer); /* ignored once a model owns it */
    st_node_destroy(g->l[i].input);
    free(g->l[i].out);
  }
  free(g->l);
}

static const char *const k_fn_keys[] = {"name", "trainable", "layers", "input_layers",
                                        "output_layers", NULL};

static st_status fn_config(const st__keras_ctx *c, const json_t *cfg) {
  if (!json_is_object(cfg)) return st__keras_error(c, "config is missing or not an object");
  st_status s = st__keras_model_options(c, cfg, k_fn_keys, "Functional");
  if (s != ST_OK) return s;
  size_t n = json_array_size(json_object_get(cfg, "layers"));
  if (!json_is_array(json_object_get(cfg, "layers")) || n < 2 || n > ST__KERAS_MAX_LAYERS)
    return st__keras_error(c, "config.layers is missing or not a list of 2..%d layers",
                           ST__KERAS_MAX_LAYERS);
  return ST_OK;
}

st_status st__keras_import_functional(const st__keras_ctx *c, const json_t *root,
                                      const st_model_options *o, st_model **out) {
  const json_t *cfg = json_object_get(root, "config");
  st_status s = fn_config(c, cfg);
  if (s != ST_OK) return s;
  const json_t *layers = json_object_get(cfg, "layers");
  fn_graph g = {.c = c, .n = (int)json_array_size(layers)};
  g.l = calloc((size_t)g.n, sizeof *g.l);
  if (!g.l) return st_error(ST_ERR_NOMEM, "%s: out of memory", c->file);
  for (int i = 0; s == ST_OK && i < g.n; i++) s = parse_entry(&g, i, json_array_get(layers, i));
  if (s == ST_OK) s = run_calls(&g);
  st_node *in[ST_NET_MAX_IO], *outs[ST_NET_MAX_IO];
  int n_in = 0, n_out = 0;
  if (s == ST_OK) s = ends(&g, cfg, "input_layers", in, &n_in);
  if (s == ST_OK) s = ends(&g, cfg, "output_layers", outs, &n_out);
  if (s == ST_OK) {
    st_model_options mo = *o;
    const char *name = json_string_value(json_object_get(cfg, "name"));
    if (!mo.name && name && name[0] && strlen(name) < ST_NAME_MAX) mo.name = name;
    if (st_functional_create(in, n_in, outs, n_out, &mo, out) != ST_OK) s = st__keras_rethrow(c);
  }
  free_graph(&g);
  return s;
}
