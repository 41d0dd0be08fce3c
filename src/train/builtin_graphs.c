/* The built-in graph models, written with the functional C API:
 *   resnet20        He et al.'s CIFAR ResNet-20 (arXiv:1512.03385, section 4.2):
 *                   a 3x3 convolution with 16 filters, three stages of three
 *                   basic blocks (16, 32, 64 filters; the first block of
 *                   stages 2 and 3 halves the resolution with a 1x1 strided
 *                   projection shortcut), GlobalAveragePooling2D, Dense 10;
 *                   BatchNormalization after every convolution, he_normal
 *                   kernels without bias (the BN's beta is the bias).
 *   mobilenet-tiny  MobileNetV2's inverted residual blocks (expand 1x1, ReLU6,
 *                   DepthwiseConv2D 3x3, ReLU6, project 1x1, residual Add
 *                   when shapes allow), five blocks up to 32 channels, a 1x1
 *                   convolution to 128, GlobalAveragePooling2D, Dense 10.
 * Both take any [h, w, c] input (28x28x1 Fashion-MNIST, 32x32x3 CIFAR).
 * Their BatchNormalization layers keep moving statistics with momentum 0.9,
 * as the papers' reference code (Torch and PyTorch, momentum 0.1), not
 * Keras's 0.99: the moving average then trails the weights by ~10 steps
 * instead of ~100, which is what a run of a few epochs needs for inference
 * to see the trained model (docs/BENCHMARKS.md, "resnet20's test accuracy"). */
#include <stdlib.h>
#include <string.h>

#include "strata/train.h"
#include "train/builtin.h"

/* A graph under construction: the first error latches (later calls do
 * nothing and return NULL); every layer made is remembered so a failed
 * build frees them. */
typedef struct gb {
  st_status s;
  bool sync_bn;
  st_layer **made;
  int n, cap;
} gb;

static st_node *call(gb *g, st_status made, st_layer *l, st_node **in, int n) {
  if (g->s != ST_OK || made != ST_OK) {
    if (g->s == ST_OK) g->s = made;
    return NULL;
  }
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    st_layer **m = realloc(g->made, (size_t)cap * sizeof *m);
    if (!m) {
      st_layer_destroy(l);
      g->s = st_error(ST_ERR_NOMEM, "builtin model: out of memory");
      return NULL;
    }
    g->made = m, g->cap = cap;
  }
  g->made[g->n++] = l;
  st_node *out = NULL;
  for (int j = 0; j < n; j++)
    if (!in[j]) return NULL;
  if ((g->s = st_layer_call(l, in, n, &out)) != ST_OK) return NULL;
  return out;
}

static st_node *conv(gb *g, st_node *x, int filters, int k, int stride) {
  st_conv2d_options o = st_conv2d_default_options(filters, k, k);
  o.sh = o.sw = stride;
  o.padding = ST_PAD_SAME;
  o.use_bias = false;
  o.kernel_init = ST_INIT_HE_NORMAL;
  st_layer *l = NULL;
  st_status s = st_conv2d_ex(o, &l);
  return call(g, s, l, &x, 1);
}

static st_node *bn(gb *g, st_node *x) {
  st_layer *l = NULL;
  st_batchnorm_options o = st_batchnorm_default_options();
  o.synchronized = g->sync_bn;
  o.momentum = 0.9f;
  st_status s = st_batchnorm_ex(o, &l);
  return call(g, s, l, &x, 1);
}

static st_node *act(gb *g, st_node *x, st_activation a) {
  st_layer *l = NULL;
  st_status s = st_activation_layer(a, &l);
  return call(g, s, l, &x, 1);
}

static st_node *add(gb *g, st_node *a, st_node *b) {
  st_layer *l = NULL;
  st_status s = st_add(&l);
  st_node *in[2] = {a, b};
  return call(g, s, l, in, 2);
}

/* conv - BN - ReLU - conv - BN, + shortcut, ReLU. */
static st_node *basic_block(gb *g, st_node *x, int filters, int stride) {
  st_node *y = act(g, bn(g, conv(g, x, filters, 3, stride)), ST_ACT_RELU);
  y = bn(g, conv(g, y, filters, 3, 1));
  st_node *sc = stride == 1 ? x : bn(g, conv(g, x, filters, 1, stride));
  return act(g, add(g, y, sc), ST_ACT_RELU);
}

static st_node *head(gb *g, st_node *x) {
  st_layer *gap = NULL, *d = NULL;
  st_status s = st_global_avgpool2d(&gap);
  x = call(g, s, gap, &x, 1);
  s = st_dense(10, ST_ACT_LINEAR, &d);
  return call(g, s, d, &x, 1);
}

static st_node *resnet20(gb *g, st_node *x) {
  x = act(g, bn(g, conv(g, x, 16, 3, 1)), ST_ACT_RELU);
  const int filters[3] = {16, 32, 64};
  for (int stage = 0; stage < 3; stage++)
    for (int b = 0; b < 3; b++) x = basic_block(g, x, filters[stage], stage > 0 && b == 0 ? 2 : 1);
  return head(g, x);
}

static st_node *depthwise(gb *g, st_node *x, int stride) {
  st_depthwise_conv2d_options o = st_depthwise_conv2d_default_options(3, 3);
  o.sh = o.sw = stride;
  o.padding = ST_PAD_SAME;
  o.use_bias = false;
  st_layer *l = NULL;
  st_status s = st_depthwise_conv2d_ex(o, &l);
  return call(g, s, l, &x, 1);
}

/* MobileNetV2's inverted residual: expand (t x channels), depthwise, project. */
static st_node *inverted(gb *g, st_node *x, int in_c, int out_c, int t, int stride) {
  st_node *y = x;
  if (t != 1) y = act(g, bn(g, conv(g, y, in_c * t, 1, 1)), ST_ACT_RELU6);
  y = act(g, bn(g, depthwise(g, y, stride)), ST_ACT_RELU6);
  y = bn(g, conv(g, y, out_c, 1, 1));
  return stride == 1 && in_c == out_c ? add(g, x, y) : y;
}

static st_node *mobilenet_tiny(gb *g, st_node *x) {
  x = act(g, bn(g, conv(g, x, 16, 3, 1)), ST_ACT_RELU6);
  x = inverted(g, x, 16, 16, 1, 1);
  x = inverted(g, x, 16, 24, 6, 2);
  x = inverted(g, x, 24, 24, 6, 1);
  x = inverted(g, x, 24, 32, 6, 2);
  x = inverted(g, x, 32, 32, 6, 1);
  x = act(g, bn(g, conv(g, x, 128, 1, 1)), ST_ACT_RELU6);
  return head(g, x);
}

st_status st__builtin_graph_create(const char *name, const st_model_options *o,
                                   st_model **out) {
  bool resnet = strcmp(name, "resnet20") == 0;
  st_shape in = o->input_shape.rank == 3 ? o->input_shape : st_shape3(28, 28, 1);
  gb g = {ST_OK, o->sync_batchnorm, NULL, 0, 0};
  st_node *x = NULL;
  if ((g.s = st_input(in, "input_layer", &x)) != ST_OK) return g.s;
  st_node *y = resnet ? resnet20(&g, x) : mobilenet_tiny(&g, x);
  st_model_options mo = *o;
  mo.name = o->name && strcmp(o->name, "sequential") ? o->name : name;
  if (g.s == ST_OK) g.s = st_functional_create(&x, 1, &y, 1, &mo, out);
  if (g.s != ST_OK) {
    st_status s = g.s;
    for (int i = 0; i < g.n; i++) st_layer_destroy(g.made[i]);
    st_node_destroy(x);
    free(g.made);
    return s;
  }
  free(g.made);
  return ST_OK;
}
