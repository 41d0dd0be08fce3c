/* DepthwiseConv2D (Keras "DepthwiseConv2D"), NHWC: each input channel ci is
 * convolved with its own depth_multiplier (M) filters,
 *   z[b, oy, ox, ci*M + m] = sum_{ky,kx} x[b, iy, ix, ci] * k[ky, kx, ci, m]
 * y = act(z + bias), with depthwise_kernel [kh, kw, c, M] and bias [c*M]
 * (Keras layout and output-channel order), strides and 'valid'/'same'
 * padding (TensorFlow's split).
 *
 * Direct loops: for one output pixel and one kernel tap, the c*M products
 * read a contiguous input row and a contiguous kernel row (a vector multiply-
 * add when M = 1). Bias, activation and their gradients go through the
 * backend. Host-memory note: the convolution loops read and write the
 * buffers directly (valid for the host backends cpu and reference; a device
 * backend needs a kernel for them, as synchronized BatchNorm's loops do). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn/layer.h"

enum { KERNEL = 0, BIAS = 1 };

typedef struct dw_config {
  st_depthwise_conv2d_options o;
  st_conv_geom g; /* set by build; g.c = input channels */
} dw_config;

/* Output size and leading pad of one axis as TensorFlow computes them; false
 * when 'valid' does not fit. */
static bool dw_axis(int in, int k, int s, st_padding pad, int *out, int *pad_before) {
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

static st_status dw_build(st_layer *l) {
  dw_config *cf = l->config;
  const st_depthwise_conv2d_options *o = &cf->o;
  st_conv_geom *g = &cf->g;
  char buf[64];
  st_shape_format(l->in_shape, buf, sizeof buf);
  if (l->in_shape.rank != 3)
    return st_error(ST_ERR_INVALID,
                    "DepthwiseConv2D expects image input (None, h, w, c) but got %s", buf);
  *g = (st_conv_geom){.h = l->in_shape.dims[0], .w = l->in_shape.dims[1],
                      .c = l->in_shape.dims[2], .kh = o->kh, .kw = o->kw,
                      .sh = o->sh, .sw = o->sw};
  if (!dw_axis(g->h, g->kh, g->sh, o->padding, &g->oh, &g->pad_top) ||
      !dw_axis(g->w, g->kw, g->sw, o->padding, &g->ow, &g->pad_left))
    return st_error(ST_ERR_INVALID,
                    "DepthwiseConv2D: kernel %dx%d does not fit input %s with 'valid' "
                    "padding", o->kh, o->kw, buf);
  int cm = g->c * o->depth_multiplier;
  l->out_shape = st_shape3(g->oh, g->ow, cm);
  st__layer_add_param(l, "depthwise_kernel",
                      (st_shape){4, {o->kh, o->kw, g->c, o->depth_multiplier}},
                      o->depthwise_init, true);
  if (o->use_bias) st__layer_add_param(l, "bias", st_shape1(cm), o->bias_init, true);
  l->cache_per_example = st_activation_needs_input(o->activation)
                             ? st_shape_size(l->out_shape) : 0;
  l->out_activation = o->activation;
  return ST_OK;
}

/* Workspace: dz [batch, oh, ow, c*M] when the activation is not linear (used
 * when dy is read-only). */
static size_t dw_workspace(const st_layer *l, int batch) {
  const dw_config *cf = l->config;
  if (cf->o.activation == ST_ACT_LINEAR) return 0;
  return (size_t)batch * st_shape_size(l->out_shape);
}

/* The in-image tap range [*k0, *k1) for an output coordinate whose window
 * starts at input coordinate `start`. */
static void taps(int start, int k, int n, int *k0, int *k1) {
  *k0 = start < 0 ? -start : 0;
  *k1 = start + k > n ? n - start : k;
  if (*k1 < *k0) *k1 = *k0;
}

/* Four floats as one GCC vector (an SSE register): the M = 1 paths keep a
 * pixel's channel sums in registers across its taps, four at a time. */
typedef float v4f __attribute__((vector_size(16)));
static inline v4f ld4(const float *p) {
  v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void st4(float *p, v4f v) { memcpy(p, &v, sizeof v); }

/* One output pixel's window: input rows at (y0, x0) and the taps in the image. */
typedef struct dw_win {
  const float *x; /* x of the pixel's example [h, w, c] */
  int y0, x0, ky0, ky1, kx0, kx1;
} dw_win;

static dw_win dw_window(const st_conv_geom *g, const float *xb, int oy, int ox) {
  dw_win w = {.x = xb, .y0 = oy * g->sh - g->pad_top, .x0 = ox * g->sw - g->pad_left};
  taps(w.y0, g->kh, g->h, &w.ky0, &w.ky1);
  taps(w.x0, g->kw, g->w, &w.kx0, &w.kx1);
  return w;
}

static const float *dw_xrow(const st_conv_geom *g, const dw_win *w, int ky, int kx) {
  return w->x + ((size_t)(w->y0 + ky) * g->w + w->x0 + kx) * g->c;
}

/* zr[c*M] of one pixel (no bias). */
static void dw_pixel(const st_conv_geom *g, int M, const dw_win *w, const float *k,
                     float *restrict zr) {
  const int C = g->c, CM = C * M;
  int c = 0;
  if (M == 1)
    for (; c + 4 <= C; c += 4) {
      v4f acc = {0};
      for (int ky = w->ky0; ky < w->ky1; ky++)
        for (int kx = w->kx0; kx < w->kx1; kx++)
          acc += ld4(dw_xrow(g, w, ky, kx) + c) * ld4(k + ((size_t)ky * g->kw + kx) * CM + c);
      st4(zr + c, acc);
    }
  for (int j = c * M; j < CM; j++) zr[j] = 0.0f;
  for (int ky = w->ky0; c < C && ky < w->ky1; ky++)
    for (int kx = w->kx0; kx < w->kx1; kx++) {
      const float *restrict xr = dw_xrow(g, w, ky, kx);
      const float *restrict kr = k + ((size_t)ky * g->kw + kx) * CM;
      for (int ci = c; ci < C; ci++)
        for (int m = 0; m < M; m++) zr[ci * M + m] += xr[ci] * kr[ci * M + m];
    }
}

/* z[b, oh, ow, c*M] = depthwise convolution of x (no bias). */
static void dw_conv(const dw_config *cf, int batch, const float *x, const float *k,
                    float *z) {
  const st_conv_geom *g = &cf->g;
  const int M = cf->o.depth_multiplier;
  const size_t CM = (size_t)g->c * M, X = (size_t)g->h * g->w * g->c;
  for (int b = 0; b < batch; b++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++) {
        dw_win w = dw_window(g, x + b * X, oy, ox);
        dw_pixel(g, M, &w, k, z + (((size_t)b * g->oh + oy) * g->ow + ox) * CM);
      }
}

static void dw_forward(const st_layer *l, st_layer_args *c) {
  const dw_config *cf = l->config;
  st_activation act = cf->o.activation;
  const int rows = c->batch * cf->g.oh * cf->g.ow, cols = (int)l->out_shape.dims[2];
  float *z = st_activation_needs_input(act) ? c->cache : c->y; /* [rows, cols] */
  if (!st__args_host(c)) { /* host loops only (see layer.h host_loops) */
    c->be->fill(c->ctx, (size_t)rows * cols, NAN, c->y);
    return;
  }
  dw_conv(cf, c->batch, c->x, c->w[KERNEL], z);
  if (rows == 0) return;
  if (cf->o.use_bias) c->be->bias_add(c->ctx, rows, cols, c->w[BIAS], z);
  if (act != ST_ACT_LINEAR) c->be->act_forward(c->ctx, act, rows, cols, z, c->y);
}

/* One pixel's share: dk[tap] += x row * dz row, dx row += k[tap] * dz row
 * (dx NULL: skipped). */
static void dw_pixel_grads(const st_conv_geom *g, int M, const dw_win *w, const float *k,
                           const float *restrict dzr, float *dk, float *dxb) {
  const int C = g->c, CM = C * M;
  for (int ky = w->ky0; ky < w->ky1; ky++)
    for (int kx = w->kx0; kx < w->kx1; kx++) {
      size_t ko = ((size_t)ky * g->kw + kx) * CM;
      const float *restrict xr = dw_xrow(g, w, ky, kx), *restrict kr = k + ko;
      float *restrict dkr = dk + ko;
      float *restrict dxr = dxb ? dxb + (xr - w->x) : NULL;
      int c = 0;
      if (M == 1)
        for (; c + 4 <= C; c += 4) {
          v4f d = ld4(dzr + c);
          st4(dkr + c, ld4(dkr + c) + ld4(xr + c) * d);
          if (dxr) st4(dxr + c, ld4(dxr + c) + ld4(kr + c) * d);
        }
      for (int ci = c; ci < C; ci++) {
        float acc = 0.0f;
        for (int m = 0; m < M; m++) {
          dkr[ci * M + m] += xr[ci] * dzr[ci * M + m];
          acc += kr[ci * M + m] * dzr[ci * M + m];
        }
        if (dxr) dxr[ci] += acc;
      }
    }
}

/* dk (+)= x . dz and dx (=) k . dz over every output pixel and tap; dx may
 * be NULL. dk and dx are zeroed here first. */
static void dw_grads(const dw_config *cf, int batch, const float *x, const float *k,
                     const float *dz, float *dk, float *dx) {
  const st_conv_geom *g = &cf->g;
  const int M = cf->o.depth_multiplier;
  const size_t CM = (size_t)g->c * M, X = (size_t)g->h * g->w * g->c;
  memset(dk, 0, (size_t)g->kh * g->kw * CM * sizeof(float));
  if (dx) memset(dx, 0, (size_t)batch * X * sizeof(float));
  for (int b = 0; b < batch; b++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++) {
        dw_win w = dw_window(g, x + b * X, oy, ox);
        const float *dzr = dz + (((size_t)b * g->oh + oy) * g->ow + ox) * CM;
        dw_pixel_grads(g, M, &w, k, dzr, dk, dx ? dx + b * X : NULL);
      }
}

static void dw_backward(const st_layer *l, st_layer_args *c) {
  const dw_config *cf = l->config;
  st_activation act = st__layer_grad_act(l, cf->o.activation);
  const int rows = c->batch * cf->g.oh * cf->g.ow, cols = (int)l->out_shape.dims[2];
  const float *dz = c->dy; /* [rows, cols] = dy * act'(z) */
  if (!st__args_host(c)) { /* host loops only (see layer.h host_loops) */
    for (int p = 0; p < l->nparams; p++)
      c->be->fill(c->ctx, st_shape_size(l->params[p].shape), NAN, c->dw[p]);
    if (c->dx) c->be->fill(c->ctx, (size_t)c->batch * st_shape_size(l->in_shape), NAN, c->dx);
    return;
  }
  if (act != ST_ACT_LINEAR && rows > 0) {
    float *buf = c->dy_writable ? (float *)c->dy : c->workspace;
    const float *z = st_activation_needs_input(act) ? c->cache : NULL;
    c->be->act_backward(c->ctx, act, rows, cols, z, c->y, c->dy, buf);
    dz = buf;
  }
  dw_grads(cf, c->batch, c->x, c->w[KERNEL], dz, c->dw[KERNEL], c->dx);
  if (cf->o.use_bias) {
    if (rows > 0) c->be->bias_grad(c->ctx, rows, cols, dz, c->dw[BIAS]);
    else c->be->fill(c->ctx, (size_t)cols, 0.0f, c->dw[BIAS]);
  }
}

static void dw_options(const st_layer *l, st_layer_options *out) {
  out->depthwise = ((const dw_config *)l->config)->o;
  out->depthwise.name = NULL;
}

static const st_layer_vtable dw_vtable = {
    .class_name = "DepthwiseConv2D",
    .base_name = "depthwise_conv2d",
    .build = dw_build,
    .workspace_floats = dw_workspace,
    .forward = dw_forward,
    .backward = dw_backward,
    .get_options = dw_options,
    .host_loops = true,
};

st_depthwise_conv2d_options st_depthwise_conv2d_default_options(int kh, int kw) {
  return (st_depthwise_conv2d_options){
      .kh = kh, .kw = kw, .sh = 1, .sw = 1, .depth_multiplier = 1,
      .padding = ST_PAD_VALID, .activation = ST_ACT_LINEAR, .use_bias = true,
      .depthwise_init = ST_INIT_GLOROT_UNIFORM, .bias_init = ST_INIT_ZEROS, .name = NULL};
}

/* New unbuilt DepthwiseConv2D layer (caller owns it until st_model_add), or
 * NULL + error naming the option. */
st_status st_depthwise_conv2d_ex(st_depthwise_conv2d_options o, st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_depthwise_conv2d_ex: out is NULL");
  *out = NULL;
  const char *bad = o.kh <= 0 || o.kw <= 0 ? "kernel_size"
                    : o.sh <= 0 || o.sw <= 0 ? "strides"
                    : o.depth_multiplier <= 0 ? "depth_multiplier" : NULL;
  if (bad)
    return st_error(ST_ERR_INVALID, "DepthwiseConv2D: %s must be positive (kernel %dx%d, "
                    "strides %dx%d, depth_multiplier %d)", bad, o.kh, o.kw, o.sh, o.sw,
                    o.depth_multiplier);
  if (o.padding != ST_PAD_VALID && o.padding != ST_PAD_SAME)
    return st_error(ST_ERR_INVALID, "DepthwiseConv2D: invalid padding %d (valid or same)",
                    (int)o.padding);
  if ((int)o.activation < 0 || o.activation >= ST_ACT_COUNT)
    return st_error(ST_ERR_INVALID, "DepthwiseConv2D: invalid activation %d",
                    (int)o.activation);
  if ((int)o.depthwise_init < 0 || o.depthwise_init >= ST_INIT_COUNT ||
      (int)o.bias_init < 0 || o.bias_init >= ST_INIT_COUNT)
    return st_error(ST_ERR_INVALID, "DepthwiseConv2D: invalid depthwise_init or bias_init");
  dw_config cf = {.o = o};
  cf.o.name = NULL; /* the config copy must not point at the caller's string */
  return st__layer_new(&dw_vtable, &cf, sizeof cf, o.name, out);
}
