/* Keras's functional models: the graph of st_layer_call nodes between the
 * given inputs and outputs becomes the net's nodes, in a topological order
 * (depth-first from the outputs, each node after its inputs in input order),
 * with its layers in the order of their first call. Sequential is the chain
 * st_model_add builds (model.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distribute/strategy.h" /* st__strategy_release */
#include "model/model.h"

/* The nodes reachable from the outputs, in topological order. */
typedef struct graph {
  st_node **order;
  int n, cap;
  st_node *const *inputs;
  int n_in;
} graph;

static int input_index(const graph *g, const st_node *t) {
  for (int j = 0; j < g->n_in; j++)
    if (g->inputs[j] == t) return j;
  return -1;
}

/* Depth-first: marks 1 = on the path, 2 = placed. The graph is acyclic by
 * construction (a node's inputs exist before it), so depth is bounded by the
 * node count; recursion depth = the longest path. */
static st_status visit(graph *g, st_node *t, const st_node *from) {
  if (t->mark == 2) return ST_OK;
  if (!t->layer) {
    if (input_index(g, t) < 0) {
      char s[64], who[ST_NAME_MAX + 40];
      return st_error(ST_ERR_INVALID, "st_functional_create: the graph is disconnected: input "
                      "tensor %s%s%s of shape %s, read by %s, is not among the model's "
                      "inputs", t->name[0] ? "'" : "", t->name[0] ? t->name : "(unnamed)",
                      t->name[0] ? "'" : "", st_shape_format(t->shape, s, sizeof s),
                      from ? st__layer_label(from->layer, who, sizeof who) : "an output");
    }
    t->mark = 2;
    return ST_OK;
  }
  if (t->layer->in_model)
    return st_error(ST_ERR_INVALID, "st_functional_create: layer '%s' (%s) belongs to another "
                    "model", st_layer_name(t->layer), st_layer_class(t->layer));
  for (int j = 0; j < t->n_in; j++) {
    st_status s = visit(g, t->in[j], t);
    if (s != ST_OK) return s;
  }
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 16;
    st_node **o = realloc(g->order, (size_t)cap * sizeof *o);
    if (!o) return st_error(ST_ERR_NOMEM, "st_functional_create: out of memory");
    g->order = o, g->cap = cap;
  }
  g->order[g->n++] = t;
  t->mark = 2;
  return ST_OK;
}

static st_status check_args(st_node *const *inputs, int n_in, st_node *const *outputs,
                            int n_out) {
  if (!inputs) return st_error(ST_ERR_INVALID, "st_functional_create: inputs is NULL");
  if (!outputs) return st_error(ST_ERR_INVALID, "st_functional_create: outputs is NULL");
  if (n_in < 1 || n_in > ST_NET_MAX_IO)
    return st_error(ST_ERR_INVALID, "st_functional_create: n_in is %d (expected 1..%d)", n_in,
                    ST_NET_MAX_IO);
  if (n_out < 1 || n_out > ST_NET_MAX_IO)
    return st_error(ST_ERR_INVALID, "st_functional_create: n_out is %d (expected 1..%d)", n_out,
                    ST_NET_MAX_IO);
  for (int j = 0; j < n_in; j++) {
    if (!inputs[j])
      return st_error(ST_ERR_INVALID, "st_functional_create: inputs[%d] is NULL", j);
    if (inputs[j]->layer)
      return st_error(ST_ERR_INVALID, "st_functional_create: inputs[%d] is the output of layer "
                      "'%s', not a model input (st_input)", j, st_layer_name(inputs[j]->layer));
    if (inputs[j]->in_model)
      return st_error(ST_ERR_INVALID, "st_functional_create: inputs[%d] belongs to another "
                      "model", j);
    for (int i = 0; i < j; i++)
      if (inputs[i] == inputs[j])
        return st_error(ST_ERR_INVALID, "st_functional_create: inputs[%d] and inputs[%d] are "
                        "the same tensor", i, j);
  }
  for (int j = 0; j < n_out; j++) {
    if (!outputs[j])
      return st_error(ST_ERR_INVALID, "st_functional_create: outputs[%d] is NULL (did the call "
                      "that made it fail? last error: %s)", j, st_last_error());
    if (!outputs[j]->layer)
      return st_error(ST_ERR_INVALID, "st_functional_create: outputs[%d] is a model input: a "
                      "model needs at least one layer", j);
    for (int i = 0; i < j; i++)
      if (outputs[i] == outputs[j])
        return st_error(ST_ERR_INVALID, "st_functional_create: outputs[%d] and outputs[%d] are "
                        "the same tensor", i, j);
  }
  return ST_OK;
}

/* Clears the marks visit set (on every node it reached, and the inputs). */
static void clear_marks(graph *g) {
  for (int i = 0; i < g->n; i++) {
    g->order[i]->mark = 0;
    for (int j = 0; j < g->order[i]->n_in; j++) g->order[i]->in[j]->mark = 0;
  }
  for (int j = 0; j < g->n_in; j++) g->inputs[j]->mark = 0;
}

/* Keras names: "dense", "dense_1", ... per class, in layer order; inputs
 * "input_1", "input_2". */
static void name_layers(st_net *net, st_node *const *inputs, int n_in) {
  for (int i = 0; i < net->nlayers; i++) {
    st_layer *l = net->layers[i];
    if (l->named_by_user) continue;
    int count = 0;
    for (int k = 0; k < i; k++)
      if (!net->layers[k]->named_by_user && net->layers[k]->vt == l->vt) count++;
    if (count) snprintf(l->name, sizeof l->name, "%s_%d", l->vt->base_name, count);
    else snprintf(l->name, sizeof l->name, "%s", l->vt->base_name);
  }
  for (int j = 0; j < n_in; j++)
    if (!inputs[j]->name[0]) snprintf(inputs[j]->name, sizeof inputs[j]->name, "input_%d", j + 1);
}

/* The layers in first-call order with their variables laid out, then the
 * nodes (tensor ids: node index, or -1 - input index). */
static int layer_index(const st_net *net, const st_layer *l) {
  for (int i = 0; i < net->nlayers; i++)
    if (net->layers[i] == l) return i;
  return -1;
}

static st_status fill_net(st_net *net, graph *g) {
  for (int i = 0; i < g->n; i++) g->order[i]->layer->calls = 0;
  for (int i = 0; i < g->n; i++) {
    st_layer *l = g->order[i]->layer;
    if (layer_index(net, l) >= 0) continue;
    if (net->nlayers == net->cap) {
      int cap = net->cap ? net->cap * 2 : 8;
      st_layer **grown = realloc(net->layers, (size_t)cap * sizeof *grown);
      if (!grown) return st_error(ST_ERR_NOMEM, "st_functional_create: out of memory");
      net->layers = grown, net->cap = cap;
    }
    net->layers[net->nlayers++] = l;
    for (int p = 0; p < l->nparams; p++) {
      size_t *total = l->params[p].trainable ? &net->n_params : &net->n_state;
      l->params[p].offset = *total;
      *total += st_shape_size(l->params[p].shape);
    }
  }
  for (int i = 0; i < g->n; i++) {
    st_node *t = g->order[i];
    int in[ST_LAYER_MAX_INPUTS];
    for (int j = 0; j < t->n_in; j++) {
      st_node *src = t->in[j];
      in[j] = src->layer ? src->mark : st__net_input_tensor(input_index(g, src));
    }
    st_status s = st__net_add_node(net, layer_index(net, t->layer), in, t->n_in);
    if (s != ST_OK) return s;
    t->mark = i; /* its tensor id, read by later nodes */
  }
  return ST_OK;
}

/* ReLU + MaxPooling2D in one backward pass (model.c does it for chains):
 * only where the pool is the one reader of a ReLU output and neither layer
 * is shared. */
static void fold_relus(st_net *net) {
  for (int k = 0; k < net->nnodes; k++) {
    st_layer *l = net->layers[net->nodes[k].layer];
    int t = net->nodes[k].in[0];
    if (!l->folds_input_relu || l->calls != 1 || t < 0) continue;
    st_layer *prev = net->layers[net->nodes[t].layer];
    int readers = 0;
    for (int q = 0; q < net->nnodes; q++)
      for (int j = 0; j < net->nodes[q].n_in; j++) readers += net->nodes[q].in[j] == t;
    if (readers == 1 && prev->calls == 1 && prev->out_activation == ST_ACT_RELU)
      l->input_relu_folded = prev->act_grad_folded = true;
  }
}

/* Names must be unique within a model (weights files and Keras JSON key on them). */
static st_status check_names(const st_net *net) {
  for (int i = 0; i < net->nlayers; i++)
    for (int k = 0; k < i; k++)
      if (strcmp(net->layers[i]->name, net->layers[k]->name) == 0)
        return st_error(ST_ERR_INVALID, "st_functional_create: two layers are named '%s' (%s "
                        "and %s): names must be unique in a model", net->layers[i]->name,
                        net->layers[k]->vt->class_name, net->layers[i]->vt->class_name);
  return ST_OK;
}

/* A layer reading another's variables (st_layer.tied) needs that layer in
 * the model, called before it (its variables laid out, its gradient last). */
static st_status check_tied(const st_net *net) {
  for (int i = 0; i < net->nlayers; i++) {
    const st_layer *l = net->layers[i];
    if (!l->tied) continue;
    int t = layer_index(net, l->tied);
    if (t < 0 || t > i)
      return st_error(ST_ERR_INVALID, "st_functional_create: layer '%s' (%s) reads the "
                      "variables of layer '%s' (%s), which %s", l->name, l->vt->class_name,
                      l->tied->name, l->tied->vt->class_name,
                      t < 0 ? "is not in the model" : "is called after it (call it first)");
  }
  return ST_OK;
}

static void set_inputs(st_model *m, st_node *const *inputs, int n_in) {
  st_net *net = &m->net;
  net->n_inputs = n_in;
  int total = 0;
  for (int j = 0; j < n_in; j++) {
    net->inputs[j] = inputs[j]->shape;
    total += (int)st_shape_size(inputs[j]->shape);
  }
  net->input_shape = n_in == 1 ? inputs[0]->shape : st_shape1(total);
}

/* Undo fill_net on failure: the layers and inputs go back to the caller. */
static void give_back(st_model *m) {
  for (int i = 0; i < m->net.nlayers; i++) m->net.layers[i]->calls = 0;
  m->net.nlayers = 0;
  m->net.nnodes = 0;
}

st_status st_functional_create(st_node *const *inputs, int n_in, st_node *const *outputs,
                               int n_out, const st_model_options *o, st_model **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_functional_create: out is NULL");
  *out = NULL;
  st_status s = check_args(inputs, n_in, outputs, n_out);
  if (s != ST_OK) return s;
  graph g = {.inputs = inputs, .n_in = n_in};
  for (int j = 0; j < n_out && s == ST_OK; j++) s = visit(&g, outputs[j], NULL);
  clear_marks(&g);
  if (s != ST_OK) {
    free(g.order);
    return s;
  }
  st_model_options def = st_model_default_options(inputs[0]->shape);
  def.name = NULL;
  st_model *m = NULL;
  if ((s = st__model_new(o ? o : &def, "functional", &m)) != ST_OK) {
    free(g.order);
    return s;
  }
  m->functional = true;
  set_inputs(m, inputs, n_in);
  s = fill_net(&m->net, &g);
  m->net.n_outputs = n_out;
  for (int j = 0; j < n_out; j++) m->net.outputs[j] = outputs[j]->mark; /* node ids */
  clear_marks(&g);
  free(g.order);
  if (s == ST_OK) {
    name_layers(&m->net, inputs, n_in);
    s = check_names(&m->net);
    if (s == ST_OK) s = check_tied(&m->net);
  }
  if (s != ST_OK) {
    give_back(m);
    st_model_destroy(m);
    return s;
  }
  for (int i = 0; i < m->net.nlayers; i++) m->net.layers[i]->in_model = true;
  for (int j = 0; j < n_in; j++) {
    inputs[j]->in_model = true;
    m->input_nodes[m->n_input_nodes++] = inputs[j];
  }
  m->net.output = m->net.nnodes - 1;
  fold_relus(&m->net);
  *out = m;
  return ST_OK;
}

bool st_model_is_functional(const st_model *m) { return m && m->functional; }
