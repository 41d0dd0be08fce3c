/* Conv2D (Keras "Conv2D"), NHWC: y[b, oh, ow, filters] = act(conv(x, kernel)
 * + bias) with kernel [kh, kw, cin, filters], strides and 'valid'/'same'
 * padding (TensorFlow's padding split).
 *
 * Lowering: a block of nb images is unrolled with be->im2col into one buffer
 * col[nb*oh*ow, kh*kw*cin] in the workspace, and ONE gemm per block multiplies
 * it by the kernel viewed as [kh*kw*cin, filters]. nb is as many images as fit
 * fixed column and output budgets (see below), so the gemm is large; bias and
 * activation are applied per block while it is in cache. Backward, per block: dz = dy * act'(.), re-unroll the block,
 * dkernel += col^T . dz, then reuse the same buffer for dcol = dz . kernel^T
 * and scatter it into dx with be->col2im. Without a bias the backend's
 * direct convolution may take a block instead (blocks then sized by the
 * output budget alone: direct_block_images); where it declines, the block
 * is lowered as above, nb images at a time.
 *
 * Conv1D (Keras "Conv1D") is the same machinery on [steps, c] viewed as an
 * image of height 1: kernel [k, cin, filters] is [1, k, cin, filters] in
 * memory; 'causal' padding is k-1 zeros on the left only. */
#include <stdio.h>

#include "base/args.h"
#include "nn/layer.h"

enum { KERNEL = 0, BIAS = 1 };

/* Block limits in floats: unrolled columns (1 MiB) and outputs (1 MiB) per
 * block, so the columns are still in a 2 MiB L2 when the gemm packs them
 * (4 MiB blocks measured 6% slower on the cnn) and a block's output is in
 * cache for bias and activation, while the gemm stays large (cnn, 64 images
 * per worker: blocks of 12 and 7 images). */
#define COL_BUDGET_FLOATS ((size_t)1 << 18)
#define OUT_BUDGET_FLOATS ((size_t)256 << 10)
/* On a device (st_layer.device_memory) there is no cache to fit: blocks are
 * as large as this (256 MiB of columns), so that a batch is a few large
 * launches instead of dozens of small ones (the cnn at batch 128 on an
 * H200: 45 launches of 4 images per step made it slower than 16 CPU cores). */
#define DEVICE_COL_BUDGET_FLOATS ((size_t)1 << 26)

typedef struct conv_config {
  st_conv2d_options o; /* Conv1D: the equivalent 2-D options (kh 1, sh 1) */
  st_conv_geom g; /* set by build */
  st_conv1d_options o1; /* Conv1D only: the options as given */
} conv_config;

/* Output size and leading pad of one spatial axis, as TensorFlow computes them;
 * false when 'valid' does not fit. */
static bool conv_axis(int in, int k, int s, st_padding pad, int *out,
                      int *pad_before) {
  if (pad == ST_PAD_SAME) {
    *out = (in + s - 1) / s;
    int total = (*out - 1) * s + k - in;
    *pad_before = total > 0 ? total / 2 : 0;
    return true;
  }
  *out = in >= k ? (in - k) / s + 1 : 0;
  *pad_before = 0;
  return in >= k;
}

static st_status conv_build(st_layer *l) {
  conv_config *cf = l->config;
  const st_conv2d_options *o = &cf->o;
  st_conv_geom *g = &cf->g;
  char buf[64];
  st_shape_format(l->in_shape, buf, sizeof buf);
  if (l->in_shape.rank != 3)
    return st_error(ST_ERR_INVALID,
                    "Conv2D expects image input (None, h, w, c) but got %s", buf);
  *g = (st_conv_geom){.h = l->in_shape.dims[0], .w = l->in_shape.dims[1],
                      .c = l->in_shape.dims[2], .kh = o->kh, .kw = o->kw,
                      .sh = o->sh, .sw = o->sw};
  if (!conv_axis(g->h, g->kh, g->sh, o->padding, &g->oh, &g->pad_top) ||
      !conv_axis(g->w, g->kw, g->sw, o->padding, &g->ow, &g->pad_left))
    return st_error(ST_ERR_INVALID,
                    "Conv2D: kernel %dx%d does not fit input %s with 'valid' "
                    "padding", o->kh, o->kw, buf);
  l->out_shape = st_shape3(g->oh, g->ow, o->filters);
  st__layer_add_param(l, "kernel",
                      (st_shape){4, {o->kh, o->kw, g->c, o->filters}},
                      o->kernel_init, true);
  if (o->use_bias)
    st__layer_add_param(l, "bias", st_shape1(o->filters), o->bias_init, true);
  l->cache_per_example = st_activation_needs_input(o->activation)
                             ? st_shape_size(l->out_shape) : 0;
  l->out_activation = o->activation;
  return ST_OK;
}

/* Sizes of one image: P output pixels, K patch length, F filters, X input. */
typedef struct conv_sizes { size_t P, K, F, X; } conv_sizes;
static conv_sizes sizes_of(const conv_config *cf) {
  const st_conv_geom *g = &cf->g;
  return (conv_sizes){(size_t)g->oh * g->ow, (size_t)g->kh * g->kw * g->c,
                      (size_t)cf->o.filters, (size_t)g->h * g->w * g->c};
}

/* Images per im2col block for a call of `batch` examples. */
static int block_images(const st_layer *l, int batch) {
  const conv_config *cf = l->config;
  conv_sizes s = sizes_of(cf);
  size_t nb = COL_BUDGET_FLOATS / (s.P * s.K), nb_out = OUT_BUDGET_FLOATS / (s.P * s.F);
  if (l->device_memory) nb = DEVICE_COL_BUDGET_FLOATS / (s.P * s.K);
  else if (nb_out < nb) nb = nb_out;
  if (nb < 1) nb = 1;
  return nb < (size_t)batch ? (int)nb : batch;
}

/* Without a bias the backend's direct convolution (conv_direct_* slots) may
 * replace im2col + gemm: its sums run in another order, and the biased
 * convolutions (the cnn's) keep the gemm's bytes. */
static bool may_go_direct(const conv_config *cf) { return !cf->o.use_bias; }

/* Images per block of the direct convolution: no columns to fit, only the
 * output budget (so that a block is enough work to split over the backend's
 * threads: 20 images of 28x28x16). Not a function of the thread count: the
 * kernel gradient's sums per block, so the bytes, do not depend on it. */
static int direct_block_images(const st_layer *l, int batch) {
  conv_sizes s = sizes_of(l->config);
  size_t nb = OUT_BUDGET_FLOATS / (s.P * s.F);
  if (nb < 1) nb = 1;
  return nb < (size_t)batch ? (int)nb : batch;
}

/* Workspace: col[nb*P, K], then dz[batch*P, F] when the activation is not
 * linear (used when dy is read-only), then one block's dbias[F], then (no
 * bias) the direct convolution's scratch for nb images. */
static size_t conv_workspace(const st_layer *l, int batch) {
  const conv_config *cf = l->config;
  conv_sizes s = sizes_of(cf);
  int nb = block_images(l, batch);
  size_t n = (size_t)nb * s.P * s.K;
  if (cf->o.activation != ST_ACT_LINEAR) n += (size_t)batch * s.P * s.F;
  n += s.F;
  if (may_go_direct(cf))
    n += st__conv_direct_ws_floats(&cf->g, direct_block_images(l, batch), (int)s.F);
  return n;
}

/* The direct convolution's scratch (after everything conv_workspace lists
 * before it), or NULL when the layer must use im2col + gemm. */
static float *direct_ws(const st_layer *l, const st_layer_args *c) {
  const conv_config *cf = l->config;
  if (!may_go_direct(cf)) return NULL;
  conv_sizes s = sizes_of(cf);
  return c->workspace + conv_workspace(l, c->batch) -
         st__conv_direct_ws_floats(&cf->g, direct_block_images(l, c->batch), (int)s.F);
}

/* col[cnt*P, K] = im2col of images b0 .. b0+cnt-1 of x. */
static void unroll_block(const conv_config *cf, const st_layer_args *c, int b0,
                         int cnt, float *col) {
  conv_sizes s = sizes_of(cf);
  st__be_im2col_n(c->ctx, &cf->g, cnt, c->x + (size_t)b0 * s.X, col);
}

/* z rows of images b0 .. b0+cnt-1 by im2col + gemm, nb images at a time. */
static void forward_gemm(const st_layer *l, st_layer_args *c, int b0, int cnt, float *z) {
  const conv_config *cf = l->config;
  conv_sizes s = sizes_of(cf);
  int nb = block_images(l, c->batch);
  for (int i = b0; i < b0 + cnt; i += nb) {
    int k = b0 + cnt - i < nb ? b0 + cnt - i : nb;
    unroll_block(cf, c, i, k, c->workspace);
    c->be->gemm(c->ctx, false, false, (int)(k * s.P), (int)s.F, (int)s.K, 1.0f, c->workspace,
                (int)s.K, c->w[KERNEL], (int)s.F, 0.0f, z + (size_t)i * s.P * s.F, (int)s.F);
  }
}

/* Blocks of nb images (direct_block_images when the layer may go direct):
 * the convolution (direct, or im2col + gemm), then bias and activation while
 * the block is still in cache. */
static void conv_forward(const st_layer *l, st_layer_args *c) {
  const conv_config *cf = l->config;
  const st_backend *be = c->be;
  conv_sizes s = sizes_of(cf);
  st_activation act = cf->o.activation;
  float *z = st_activation_needs_input(act) ? c->cache : c->y; /* [b*P, F] */
  float *dws = direct_ws(l, c);
  int nb = dws ? direct_block_images(l, c->batch) : block_images(l, c->batch);
  for (int b0 = 0; b0 < c->batch; b0 += nb) {
    int cnt = c->batch - b0 < nb ? c->batch - b0 : nb, rows = (int)(cnt * s.P);
    size_t off = (size_t)b0 * s.P * s.F; /* block start in z and y */
    if (!dws || !st__be_conv_direct_forward(c->ctx, &cf->g, cnt, (int)s.F,
                                            c->x + (size_t)b0 * s.X, c->w[KERNEL], z + off, dws))
      forward_gemm(l, c, b0, cnt, z);
    if (cf->o.use_bias) be->bias_add(c->ctx, rows, (int)s.F, c->w[BIAS], z + off);
    if (act != ST_ACT_LINEAR)
      be->act_forward(c->ctx, act, rows, (int)s.F, z + off, c->y + off);
  }
}

/* dz[batch*P, F] = dy * act'(.): dy itself when linear, in place when dy is
 * writable, else in the workspace after the column block. */
static float *conv_dz_buffer(const st_layer *l, st_layer_args *c) {
  const conv_config *cf = l->config;
  if (st__layer_grad_act(l, cf->o.activation) == ST_ACT_LINEAR || c->dy_writable)
    return (float *)c->dy;
  conv_sizes s = sizes_of(cf);
  return c->workspace + (size_t)block_images(l, c->batch) * s.P * s.K;
}

/* dz rows of images b0 .. b0+cnt-1 (no-op when linear or folded into the
 * next layer: dz is dy). */
static void conv_dz_block(const st_layer *l, st_layer_args *c, int b0,
                          int cnt, float *dz) {
  const conv_config *cf = l->config;
  st_activation act = st__layer_grad_act(l, cf->o.activation);
  if (act == ST_ACT_LINEAR) return;
  conv_sizes s = sizes_of(cf);
  size_t off = (size_t)b0 * s.P * s.F;
  const float *z = st_activation_needs_input(act) ? c->cache + off : NULL;
  c->be->act_backward(c->ctx, act, (int)(cnt * s.P), (int)s.F, z, c->y + off,
                      c->dy + off, dz + off);
}

/* dx for images b0 .. b0+cnt-1 from dz: direct (dws not NULL, when the
 * backend takes it), else nb images at a time with the workspace's columns
 * as dcol. */
static void conv_dx_block(const st_layer *l, st_layer_args *c, int b0, int cnt,
                          const float *dz, float *dws) {
  const conv_config *cf = l->config;
  const st_backend *be = c->be;
  conv_sizes s = sizes_of(cf);
  if (dws && st__be_conv_direct_dx(c->ctx, &cf->g, cnt, (int)s.F, dz + (size_t)b0 * s.P * s.F,
                                   c->w[KERNEL], c->dx + (size_t)b0 * s.X, dws))
    return;
  float *col = c->workspace; /* [nb*P, K] */
  int nb = block_images(l, c->batch);
  for (int i = b0; i < b0 + cnt; i += nb) {
    int k = b0 + cnt - i < nb ? b0 + cnt - i : nb;
    be->gemm(c->ctx, false, true, (int)(k * s.P), (int)s.K, (int)s.F, 1.0f,
             dz + (size_t)i * s.P * s.F, (int)s.F, c->w[KERNEL], (int)s.F, 0.0f, col, (int)s.K);
    float *dx = c->dx + (size_t)i * s.X; /* [k, h, w, c] */
    be->fill(c->ctx, (size_t)k * s.X, 0.0f, dx);
    st__be_col2im_n(c->ctx, &cf->g, k, col, dx);
  }
}

/* dkernel (+)= col^T . dz for images b0 .. b0+cnt-1, nb images at a time
 * (the first block of the batch overwrites). */
static void dw_gemm(const st_layer *l, st_layer_args *c, int b0, int cnt, const float *dz) {
  const conv_config *cf = l->config;
  conv_sizes s = sizes_of(cf);
  int nb = block_images(l, c->batch);
  for (int i = b0; i < b0 + cnt; i += nb) {
    int k = b0 + cnt - i < nb ? b0 + cnt - i : nb;
    unroll_block(cf, c, i, k, c->workspace);
    c->be->gemm(c->ctx, true, false, (int)s.K, (int)s.F, (int)(k * s.P), 1.0f, c->workspace,
                (int)s.K, dz + (size_t)i * s.P * s.F, (int)s.F, i == 0 ? 0.0f : 1.0f,
                c->dw[KERNEL], (int)s.F);
  }
}

/* Per block (as forward's): dz, dkernel (+)= col^T . dz, dbias (+)= column
 * sums of dz (while the block is in cache), dx. */
static void conv_backward(const st_layer *l, st_layer_args *c) {
  const conv_config *cf = l->config;
  const st_backend *be = c->be;
  conv_sizes s = sizes_of(cf);
  float *dz = conv_dz_buffer(l, c); /* [batch*P, F] */
  float *dws = direct_ws(l, c);
  int nb = dws ? direct_block_images(l, c->batch) : block_images(l, c->batch);
  float *dbias_block = c->workspace + conv_workspace(l, c->batch) - s.F;
  if (c->batch == 0) {
    be->fill(c->ctx, s.K * s.F, 0.0f, c->dw[KERNEL]);
    if (cf->o.use_bias) be->fill(c->ctx, s.F, 0.0f, c->dw[BIAS]);
  }
  for (int b0 = 0; b0 < c->batch; b0 += nb) {
    int cnt = c->batch - b0 < nb ? c->batch - b0 : nb;
    const float *dzb = dz + (size_t)b0 * s.P * s.F;
    conv_dz_block(l, c, b0, cnt, dz);
    if (!dws || !st__be_conv_direct_dw(c->ctx, &cf->g, cnt, (int)s.F, c->x + (size_t)b0 * s.X,
                                       dzb, b0 > 0, c->dw[KERNEL], dws))
      dw_gemm(l, c, b0, cnt, dz);
    if (cf->o.use_bias) {
      be->bias_grad(c->ctx, (int)(cnt * s.P), (int)s.F, dzb, b0 == 0 ? c->dw[BIAS] : dbias_block);
      if (b0 > 0) be->axpy(c->ctx, s.F, 1.0f, dbias_block, c->dw[BIAS]);
    }
    if (c->dx) conv_dx_block(l, c, b0, cnt, dz, dws);
  }
}

static void conv_options(const st_layer *l, st_layer_options *out) {
  out->conv2d = ((const conv_config *)l->config)->o;
  out->conv2d.name = NULL;
}

static const st_layer_vtable conv_vtable = {
    .class_name = "Conv2D",
    .base_name = "conv2d",
    .build = conv_build,
    .workspace_floats = conv_workspace,
    .forward = conv_forward,
    .backward = conv_backward,
    .get_options = conv_options,
};

st_conv2d_options st_conv2d_default_options(int filters, int kh, int kw) {
  st_conv2d_options o = {
      .filters = filters, .kh = kh, .kw = kw, .sh = 1, .sw = 1,
      .padding = ST_PAD_VALID, .activation = ST_ACT_LINEAR, .use_bias = true,
      .kernel_init = ST_INIT_GLOROT_UNIFORM, .bias_init = ST_INIT_ZEROS,
      .name = NULL,
  };
  return o;
}

/* New unbuilt Conv2D layer (caller owns it until st_model_add), or NULL + error. */
st_status st_conv2d_ex(st_conv2d_options o, st_layer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  if (o.filters <= 0 || o.kh <= 0 || o.kw <= 0 || o.sh <= 0 || o.sw <= 0) {
    return st_error(ST_ERR_INVALID,
                    "Conv2D: filters, kernel size and strides must be positive "
                    "(filters %d, kernel %dx%d, strides %dx%d)",
                    o.filters, o.kh, o.kw, o.sh, o.sw);
  }
  if ((int)o.activation < 0 || o.activation >= ST_ACT_COUNT ||
      (o.padding != ST_PAD_VALID && o.padding != ST_PAD_SAME) ||
      (int)o.kernel_init < 0 || o.kernel_init >= ST_INIT_COUNT ||
      (int)o.bias_init < 0 || o.bias_init >= ST_INIT_COUNT) {
    return st_error(ST_ERR_INVALID, "Conv2D: invalid activation, padding or initializer");
  }
  conv_config cf = {.o = o};
  cf.o.name = NULL; /* the config copy must not point at the caller's string */
  return st__layer_new(&conv_vtable, &cf, sizeof cf, o.name, out);
}

st_status st_conv2d(int filters, int k, st_activation act, st_layer **out) {
  ST_REQUIRE(out);
  st_conv2d_options o = st_conv2d_default_options(filters, k, k);
  o.activation = act;
  return st_conv2d_ex(o, out);
}

/* ---- Conv1D ---------------------------------------------------------------- */

static st_status conv1d_build(st_layer *l) {
  conv_config *cf = l->config;
  const st_conv1d_options *o = &cf->o1;
  st_conv_geom *g = &cf->g;
  char buf[64];
  st_shape_format(l->in_shape, buf, sizeof buf);
  if (l->in_shape.rank != 2)
    return st_error(ST_ERR_INVALID,
                    "Conv1D expects sequence input (None, steps, channels) but got %s", buf);
  *g = (st_conv_geom){.h = 1, .w = l->in_shape.dims[0], .c = l->in_shape.dims[1],
                      .kh = 1, .kw = o->kernel_size, .sh = 1, .sw = o->strides, .oh = 1};
  if (o->padding == ST_PAD_CAUSAL) { /* left pad k-1, then 'valid' */
    g->pad_left = o->kernel_size - 1;
    g->ow = (g->w - 1) / o->strides + 1;
  } else if (!conv_axis(g->w, g->kw, g->sw, o->padding, &g->ow, &g->pad_left)) {
    return st_error(ST_ERR_INVALID,
                    "Conv1D: kernel_size %d does not fit input %s with 'valid' padding",
                    o->kernel_size, buf);
  }
  l->out_shape = (st_shape){2, {g->ow, o->filters}};
  st__layer_add_param(l, "kernel", st_shape3(o->kernel_size, g->c, o->filters),
                      o->kernel_init, true);
  if (o->use_bias)
    st__layer_add_param(l, "bias", st_shape1(o->filters), o->bias_init, true);
  l->cache_per_example = st_activation_needs_input(o->activation)
                             ? st_shape_size(l->out_shape) : 0;
  l->out_activation = o->activation;
  return ST_OK;
}

static void conv1d_options(const st_layer *l, st_layer_options *out) {
  out->conv1d = ((const conv_config *)l->config)->o1;
  out->conv1d.name = NULL;
}

static const st_layer_vtable conv1d_vtable = {
    .class_name = "Conv1D",
    .base_name = "conv1d",
    .build = conv1d_build,
    .workspace_floats = conv_workspace,
    .forward = conv_forward,
    .backward = conv_backward,
    .get_options = conv1d_options,
};

st_conv1d_options st_conv1d_default_options(int filters, int kernel_size) {
  return (st_conv1d_options){
      .filters = filters, .kernel_size = kernel_size, .strides = 1,
      .padding = ST_PAD_VALID, .activation = ST_ACT_LINEAR, .use_bias = true,
      .kernel_init = ST_INIT_GLOROT_UNIFORM, .bias_init = ST_INIT_ZEROS, .name = NULL};
}

/* New unbuilt Conv1D layer (caller owns it until st_model_add), or NULL + error. */
st_status st_conv1d_ex(st_conv1d_options o, st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_conv1d_ex: out is NULL");
  *out = NULL;
  const char *bad = o.filters <= 0 ? "filters" : o.kernel_size <= 0 ? "kernel_size"
                    : o.strides <= 0 ? "strides" : NULL;
  if (bad)
    return st_error(ST_ERR_INVALID, "Conv1D: %s must be positive (filters %d, "
                    "kernel_size %d, strides %d)", bad, o.filters, o.kernel_size, o.strides);
  if ((int)o.padding < 0 || o.padding > ST_PAD_CAUSAL)
    return st_error(ST_ERR_INVALID, "Conv1D: invalid padding %d (valid, same or causal)",
                    (int)o.padding);
  if ((int)o.activation < 0 || o.activation >= ST_ACT_COUNT)
    return st_error(ST_ERR_INVALID, "Conv1D: invalid activation %d", (int)o.activation);
  if ((int)o.kernel_init < 0 || o.kernel_init >= ST_INIT_COUNT ||
      (int)o.bias_init < 0 || o.bias_init >= ST_INIT_COUNT)
    return st_error(ST_ERR_INVALID, "Conv1D: invalid kernel_init or bias_init");
  conv_config cf = {.o1 = o};
  cf.o1.name = NULL; /* the config copy must not point at the caller's string */
  cf.o = st_conv2d_default_options(o.filters, 1, o.kernel_size);
  cf.o.sw = o.strides;
  cf.o.activation = o.activation, cf.o.use_bias = o.use_bias;
  cf.o.kernel_init = o.kernel_init, cf.o.bias_init = o.bias_init;
  return st__layer_new(&conv1d_vtable, &cf, sizeof cf, o.name, out);
}
