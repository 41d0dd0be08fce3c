/* MultiHeadAttention (Keras class): inputs query xs[0] [batch, Tq, dq], value
 * xs[1] [batch, Tv, dv] and optional key xs[2] [batch, Tv, dk] (default: the
 * value), Keras's call order. Per example and head h:
 *   Q = query Wq + bq [Tq, H*K], Kp = key Wk + bk [Tv, H*K], V = value Wv + bv
 *   P_h = softmax(Q_h Kp_h^T / sqrt(K) (+ causal mask)) [Tq, Tv]
 *   O_h = dropout(P_h) V_h [Tq, V] (the heads side by side: O [Tq, H*V])
 *   y = O Wo + bo [Tq, out]
 * The projections are GEMMs over [batch*T, d] rows (one fused GEMM for
 * self-attention: the three inputs one buffer), the scores and the weighted
 * sums GEMMs per (example, head), the softmax in place (the backend's softmax
 * activation; the causal mask is a block of 0/-inf the score GEMM adds to),
 * dropout the backend's: every step goes through the backend table, so the
 * layer runs on any backend. The plain-loop reference is
 * src/nn/attention_ref.c.
 *
 * cache [batch * cache_per_example], one block per tensor, batch-major:
 *   Q [batch, Tq, H*K] | Kp [batch, Tv, H*K] | V [batch, Tv, H*V]
 *   | P [batch, H, Tq, Tv] (softmax, before dropout) | O [batch, Tq, H*V]
 * workspace: dO [batch, Tq, H*V] | dQ [batch, Tq, H*K] | dKp [batch, Tv, H*K]
 *   | dV [batch, Tv, H*V] | dP [batch, H, Tq, Tv] | Pd [batch, H, Tq, Tv]
 *   (Pd, the dropped-out P, only with dropout) | mask [Tq, Tv] (causal only)
 *   | bcat (self-attention shapes only: see bufs). */
#include <math.h>
#include <stdio.h>

#include "base/args.h"
#include "nn/attention.h"

static const char *who(const st_layer *l, char *buf, size_t n) {
  if (l->name[0])
    snprintf(buf, n, "MultiHeadAttention '%s'", l->name);
  else
    snprintf(buf, n, "MultiHeadAttention");
  return buf;
}

static st_status shape_error(const st_layer *l, const char *what) {
  char w[96], a[64], b[64], k[64];
  int ki = st__mha_key_input(l);
  return st_error(ST_ERR_INVALID, "%s: query has shape %s, value %s, key %s: %s",
                  who(l, w, sizeof w), st_shape_format(l->in_shapes[0], a, sizeof a),
                  st_shape_format(l->in_shapes[1], b, sizeof b),
                  ki == 2 ? st_shape_format(l->in_shapes[2], k, sizeof k) : "(the value)", what);
}

static st_shape shape2(int a, int b) { return (st_shape){2, {a, b}}; }

static void add_params(st_layer *l, st__mha_config *m) {
  const st_mha_options *o = &m->o;
  int h = m->heads;
  m->qb = m->kb = m->vb = m->ob = -1;
  m->qk = st__layer_add_param(l, "query/kernel", st_shape3(m->dq, h, m->kd), o->kernel_init, true);
  if (o->use_bias)
    m->qb = st__layer_add_param(l, "query/bias", shape2(h, m->kd), o->bias_init, true);
  m->kk = st__layer_add_param(l, "key/kernel", st_shape3(m->dk, h, m->kd), o->kernel_init, true);
  if (o->use_bias)
    m->kb = st__layer_add_param(l, "key/bias", shape2(h, m->kd), o->bias_init, true);
  m->vk = st__layer_add_param(l, "value/kernel", st_shape3(m->dv, h, m->vd), o->kernel_init, true);
  if (o->use_bias)
    m->vb = st__layer_add_param(l, "value/bias", shape2(h, m->vd), o->bias_init, true);
  m->ok = st__layer_add_param(l, "attention_output/kernel", st_shape3(h, m->vd, m->out),
                              o->kernel_init, true);
  if (o->use_bias)
    m->ob = st__layer_add_param(l, "attention_output/bias", st_shape1(m->out), o->bias_init, true);
}

static st_status mha_build(st_layer *l) {
  st__mha_config *m = l->config;
  const st_shape *s = l->in_shapes;
  int ki = st__mha_key_input(l);
  for (int j = 0; j < l->n_inputs; j++)
    if (s[j].rank != 2)
      return shape_error(l, "each input must be [length, features] per example");
  if (s[ki].dims[0] != s[1].dims[0])
    return shape_error(l, "key and value must have the same length");
  m->tq = s[0].dims[0], m->tv = s[1].dims[0];
  m->dq = s[0].dims[1], m->dv = s[1].dims[1], m->dk = s[ki].dims[1];
  m->heads = m->o.num_heads, m->kd = m->o.key_dim;
  m->vd = m->o.value_dim ? m->o.value_dim : m->o.key_dim;
  m->out = m->o.output_dim ? m->o.output_dim : m->dq;
  m->fusable = m->tq == m->tv && m->dq == m->dv && m->dk == m->dq;
  add_params(l, m);
  l->out_shape = shape2(m->tq, m->out);
  int hk = m->heads * m->kd, hv = m->heads * m->vd;
  l->cache_per_example = (size_t)m->tq * hk + (size_t)m->tv * hk + (size_t)m->tv * hv +
                         (size_t)m->heads * m->tq * m->tv + (size_t)m->tq * hv;
  return ST_OK;
}

static size_t mha_workspace(const st_layer *l, int batch) {
  const st__mha_config *m = l->config;
  size_t hk = (size_t)m->heads * m->kd, hv = (size_t)m->heads * m->vd;
  size_t p = (size_t)m->heads * m->tq * m->tv;
  size_t per = m->tq * hv + m->tq * hk + m->tv * hk + m->tv * hv + p;
  size_t w = (size_t)2 * hk + hv; /* fused: bcat [w] */
  return (size_t)batch * (per + (m->o.dropout > 0.0f ? p : 0)) +
         (m->o.use_causal_mask ? (size_t)m->tq * m->tv : 0) + (m->fusable ? w : 0);
}

/* Pointers into the cache and workspace (see the file comment). Self-
 * attention (the inputs one buffer, fused): Q, Kp and V side by side in one
 * block [batch*T, 2*H*K + H*V] (row stride ldq = ldk = ldv), dQ, dKp, dV the
 * same (each projection's GEMM writes its columns of the block in place, so
 * the weights are never copied); otherwise three blocks of strides H*K, H*K,
 * H*V. */
typedef struct bufs {
  bool fused;
  int ldq, ldk, ldv;             /* row strides of q, k, v and of dq, dk, dv */
  float *q, *k, *v, *p, *o;      /* cache */
  float *dO, *dq, *dk, *dv, *dp; /* workspace (backward) */
  float *pd;                     /* dropped-out P (== p without dropout) */
  float *mask;                   /* causal: [Tq, Tv], 0 or -inf (forward) */
  float *bcat;                   /* fused: [ldq] the three biases side by side */
} bufs;

/* The inputs are one buffer (query == value (== key)) of one shape. */
static bool is_self(const st_layer *l, const st_layer_args *c) {
  const st__mha_config *m = l->config;
  return m->fusable && c->xs[0] == c->xs[1] && (l->n_inputs < 3 || c->xs[2] == c->xs[0]);
}

static bufs carve(const st_layer *l, const st_layer_args *c, bool dropout) {
  const st__mha_config *m = l->config;
  size_t b = (size_t)c->batch, hk = (size_t)m->heads * m->kd, hv = (size_t)m->heads * m->vd;
  size_t np = b * m->heads * m->tq * m->tv;
  bufs u;
  u.fused = is_self(l, c);
  u.ldq = u.ldk = (int)(u.fused ? 2 * hk + hv : hk);
  u.ldv = (int)(u.fused ? 2 * hk + hv : hv);
  u.q = c->cache, u.k = u.fused ? u.q + hk : u.q + b * m->tq * hk;
  u.v = u.fused ? u.q + 2 * hk : u.k + b * m->tv * hk;
  u.p = c->cache + b * (m->tq * hk + m->tv * hk + m->tv * hv), u.o = u.p + np;
  u.dO = c->workspace, u.dq = u.dO + b * m->tq * hv;
  u.dk = u.fused ? u.dq + hk : u.dq + b * m->tq * hk;
  u.dv = u.fused ? u.dq + 2 * hk : u.dk + b * m->tv * hk;
  u.dp = u.dq + b * (m->tq * hk + m->tv * hk + m->tv * hv);
  u.pd = dropout ? u.dp + np : u.p;
  u.mask = c->workspace + b * (m->tq * hv + m->tq * hk + m->tv * hk + m->tv * hv) + np +
           (m->o.dropout > 0.0f ? np : 0);
  u.bcat = u.mask + (m->o.use_causal_mask ? (size_t)m->tq * m->tv : 0);
  return u;
}

/* dst[rows, ld_dst] columns [0, n) = src[rows, ld_src] columns [0, n): one
 * copy per row (the identity activation is the backend's copy). */
static void copy_cols(const st_layer_args *c, int rows, int n, const float *src, int ld_src,
                      float *dst, int ld_dst) {
  for (int r = 0; r < rows; r++)
    c->be->act_forward(c->ctx, ST_ACT_LINEAR, 1, n, src + (size_t)r * ld_src,
                       dst + (size_t)r * ld_dst);
}

static bool drops(const st__mha_config *m, const st_layer_args *c) {
  return c->training && m->o.dropout > 0.0f;
}

/* y[rows, n] = x[rows, d] W[d, n] (+ bias). */
static void project(const st_layer_args *c, int rows, int d, int n, const float *x,
                    const float *w, const float *bias, float *y) {
  c->be->gemm(c->ctx, false, false, rows, n, d, 1.0f, x, d, w, n, 0.0f, y, n);
  if (bias) c->be->bias_add(c->ctx, rows, n, bias, y);
}

/* Scores s [batch*H, Tq, Tv] = scale Q_bh Kp_bh^T per (example, head), plus
 * the causal mask when asked (-inf where key j > query i: each block starts
 * as a copy of the mask and the GEMM adds to it). */
static void scores(const st__mha_config *m, const st_layer_args *c, const bufs *u) {
  const st_backend *be = c->be;
  size_t tt = (size_t)m->tq * m->tv;
  bool causal = m->o.use_causal_mask;
  if (causal) {
    be->fill(c->ctx, tt, 0.0f, u->mask);
    for (int i = 0; i < m->tq && i + 1 < m->tv; i++)
      be->fill(c->ctx, (size_t)(m->tv - i - 1), -INFINITY, u->mask + (size_t)i * m->tv + i + 1);
  }
  float scale = 1.0f / sqrtf((float)m->kd);
  for (int b = 0; b < c->batch; b++)
    for (int h = 0; h < m->heads; h++) {
      float *s = u->p + ((size_t)b * m->heads + h) * tt;
      if (causal) be->act_forward(c->ctx, ST_ACT_LINEAR, 1, (int)tt, u->mask, s);
      be->gemm(c->ctx, false, true, m->tq, m->tv, m->kd, scale,
               u->q + (size_t)b * m->tq * u->ldq + h * m->kd, u->ldq,
               u->k + (size_t)b * m->tv * u->ldk + h * m->kd, u->ldk, causal ? 1.0f : 0.0f, s,
               m->tv);
    }
}

#define PARAM(c, i) ((i) >= 0 ? (c)->w[i] : NULL)

/* Fused: [Q Kp V] [rows, ldq] = x [Wq Wk Wv] + [bq bk bv]: each kernel's
 * GEMM writes its columns of the block, then one bias pass (bcat = the
 * three biases side by side). */
static void fused_project(const st__mha_config *m, const st_layer_args *c, const bufs *u,
                          int rows) {
  const st_backend *be = c->be;
  int hk = m->heads * m->kd, hv = m->heads * m->vd;
  const int wi[3] = {m->qk, m->kk, m->vk}, bi[3] = {m->qb, m->kb, m->vb};
  const int off[3] = {0, hk, 2 * hk}, nc[3] = {hk, hk, hv};
  for (int j = 0; j < 3; j++)
    be->gemm(c->ctx, false, false, rows, nc[j], m->dq, 1.0f, c->xs[0], m->dq, c->w[wi[j]],
             nc[j], 0.0f, u->q + off[j], u->ldq);
  if (!m->o.use_bias) return;
  for (int j = 0; j < 3; j++) copy_cols(c, 1, nc[j], c->w[bi[j]], nc[j], u->bcat + off[j], u->ldq);
  be->bias_add(c->ctx, rows, u->ldq, u->bcat, u->q);
}

static void mha_forward(const st_layer *l, st_layer_args *c) {
  const st__mha_config *m = l->config;
  if (c->batch == 0) return;
  const st_backend *be = c->be;
  int hk = m->heads * m->kd, hv = m->heads * m->vd, B = c->batch;
  bool dr = drops(m, c);
  bufs u = carve(l, c, dr);
  if (u.fused) { /* [Q Kp V] = x [Wq Wk Wv] + [bq bk bv] in one block */
    fused_project(m, c, &u, B * m->tq);
  } else {
    project(c, B * m->tq, m->dq, hk, c->xs[0], c->w[m->qk], PARAM(c, m->qb), u.q);
    project(c, B * m->tv, m->dk, hk, c->xs[st__mha_key_input(l)], c->w[m->kk], PARAM(c, m->kb),
            u.k);
    project(c, B * m->tv, m->dv, hv, c->xs[1], c->w[m->vk], PARAM(c, m->vb), u.v);
  }
  size_t tt = (size_t)m->tq * m->tv;
  scores(m, c, &u);
  /* softmax in place (x == y allowed); masked entries get exp(-inf) = 0 */
  be->act_forward(c->ctx, ST_ACT_SOFTMAX, B * m->heads * m->tq, m->tv, u.p, u.p);
  if (dr)
    be->dropout_forward(c->ctx, (size_t)B * m->heads * tt, m->o.dropout, c->seed, c->stream,
                        u.p, u.pd);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < m->heads; h++) /* O_bh = Pd_bh V_bh [Tq, V] */
      be->gemm(c->ctx, false, false, m->tq, m->vd, m->tv, 1.0f,
               u.pd + ((size_t)b * m->heads + h) * tt, m->tv,
               u.v + (size_t)b * m->tv * u.ldv + h * m->vd, u.ldv, 0.0f,
               u.o + (size_t)b * m->tq * hv + h * m->vd, hv);
  project(c, B * m->tq, hv, m->out, u.o, c->w[m->ok], PARAM(c, m->ob), c->y);
}

/* Gradients of one projection y = x W + b given dy [rows, n]: dW, db, and
 * dx (accumulated when `accumulate`: the key defaulting to the value). */
static void project_backward(const st_layer_args *c, int rows, int d, int n, const float *x,
                             const float *dy, int wi, int bi, float *dx, bool accumulate) {
  const st_backend *be = c->be;
  be->gemm(c->ctx, true, false, d, n, rows, 1.0f, x, d, dy, n, 0.0f, c->dw[wi], n);
  if (bi >= 0) be->bias_grad(c->ctx, rows, n, dy, c->dw[bi]);
  if (dx)
    be->gemm(c->ctx, false, true, rows, d, n, 1.0f, dy, n, c->w[wi], n,
             accumulate ? 1.0f : 0.0f, dx, d);
}

/* dV, dP (through dropout and softmax: dS in dp), then dQ and dKp. */
static void attention_backward(const st__mha_config *m, st_layer_args *c, bufs u, bool dr) {
  const st_backend *be = c->be;
  int hv = m->heads * m->vd, B = c->batch;
  size_t tt = (size_t)m->tq * m->tv;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < m->heads; h++) {
      const float *pd = u.pd + ((size_t)b * m->heads + h) * tt;
      const float *dO = u.dO + (size_t)b * m->tq * hv + h * m->vd;
      /* dV_bh [Tv, V] = Pd_bh^T dO_bh; dPd_bh [Tq, Tv] = dO_bh V_bh^T */
      be->gemm(c->ctx, true, false, m->tv, m->vd, m->tq, 1.0f, pd, m->tv, dO, hv, 0.0f,
               u.dv + (size_t)b * m->tv * u.ldv + h * m->vd, u.ldv);
      be->gemm(c->ctx, false, true, m->tq, m->tv, m->vd, 1.0f, dO, hv,
               u.v + (size_t)b * m->tv * u.ldv + h * m->vd, u.ldv, 0.0f,
               u.dp + ((size_t)b * m->heads + h) * tt, m->tv);
    }
  if (dr)
    be->dropout_backward(c->ctx, (size_t)B * m->heads * tt, m->o.dropout, c->seed, c->stream,
                         u.dp, u.dp);
  /* dS = P * (dPd' - rowsum(dPd' * P)) in place (masked entries: P = 0) */
  be->act_backward(c->ctx, ST_ACT_SOFTMAX, B * m->heads * m->tq, m->tv, NULL, u.p, u.dp, u.dp);
  float scale = 1.0f / sqrtf((float)m->kd);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < m->heads; h++) {
      const float *ds = u.dp + ((size_t)b * m->heads + h) * tt;
      /* dQ_bh [Tq, K] = scale dS Kp_bh; dKp_bh [Tv, K] = scale dS^T Q_bh */
      be->gemm(c->ctx, false, false, m->tq, m->kd, m->tv, scale, ds, m->tv,
               u.k + (size_t)b * m->tv * u.ldk + h * m->kd, u.ldk, 0.0f,
               u.dq + (size_t)b * m->tq * u.ldq + h * m->kd, u.ldq);
      be->gemm(c->ctx, true, false, m->tv, m->kd, m->tq, scale, ds, m->tv,
               u.q + (size_t)b * m->tq * u.ldq + h * m->kd, u.ldq, 0.0f,
               u.dk + (size_t)b * m->tv * u.ldk + h * m->kd, u.ldk);
    }
}

/* Fused: the inputs' gradients from [dQ dKp dV] (u->dq, stride ldq). When
 * every dxs[j] is asked for, one GEMM gives the whole gradient of the one
 * tensor, written to dxs[0], and the others get zeros (the caller sums them);
 * otherwise each dxs[j] asked for gets its own part, as unfused. */
static void fused_input_grads(const st_layer *l, st_layer_args *c, const bufs *u) {
  const st__mha_config *m = l->config;
  const st_backend *be = c->be;
  int hk = m->heads * m->kd, hv = m->heads * m->vd, rows = c->batch * m->tq, w = u->ldq;
  bool all = true;
  for (int j = 0; j < l->n_inputs; j++) all = all && c->dxs[j];
  if (all) { /* dx = dQ Wq^T + dKp Wk^T + dV Wv^T */
    be->gemm(c->ctx, false, true, rows, m->dq, hk, 1.0f, u->dq, w, c->w[m->qk], hk, 0.0f,
             c->dxs[0], m->dq);
    be->gemm(c->ctx, false, true, rows, m->dq, hk, 1.0f, u->dk, w, c->w[m->kk], hk, 1.0f,
             c->dxs[0], m->dq);
    be->gemm(c->ctx, false, true, rows, m->dq, hv, 1.0f, u->dv, w, c->w[m->vk], hv, 1.0f,
             c->dxs[0], m->dq);
    for (int j = 1; j < l->n_inputs; j++)
      be->fill(c->ctx, (size_t)rows * m->dq, 0.0f, c->dxs[j]);
    return;
  }
  if (c->dxs[0])
    be->gemm(c->ctx, false, true, rows, m->dq, hk, 1.0f, u->dq, w, c->w[m->qk], hk, 0.0f,
             c->dxs[0], m->dq);
  if (c->dxs[1])
    be->gemm(c->ctx, false, true, rows, m->dq, hv, 1.0f, u->dv, w, c->w[m->vk], hv, 0.0f,
             c->dxs[1], m->dq);
  float *dkx = c->dxs[st__mha_key_input(l)];
  if (dkx)
    be->gemm(c->ctx, false, true, rows, m->dq, hk, 1.0f, u->dk, w, c->w[m->kk], hk,
             l->n_inputs < 3 ? 1.0f : 0.0f, dkx, m->dq);
}

/* Fused backward of the three projections from [dQ dKp dV] (u->dq, stride
 * ldq): each kernel's gradient by its own GEMM over its columns, the biases'
 * in one pass, then the inputs' (fused_input_grads). key/bias's gradient is
 * 0 (see mha_backward). */
static void fused_backward(const st_layer *l, st_layer_args *c, const bufs *u) {
  const st__mha_config *m = l->config;
  const st_backend *be = c->be;
  int hk = m->heads * m->kd, hv = m->heads * m->vd, rows = c->batch * m->tq, w = u->ldq;
  be->gemm(c->ctx, true, false, m->dq, hk, rows, 1.0f, c->xs[0], m->dq, u->dq, w, 0.0f,
           c->dw[m->qk], hk);
  be->gemm(c->ctx, true, false, m->dq, hk, rows, 1.0f, c->xs[0], m->dq, u->dk, w, 0.0f,
           c->dw[m->kk], hk);
  be->gemm(c->ctx, true, false, m->dq, hv, rows, 1.0f, c->xs[0], m->dq, u->dv, w, 0.0f,
           c->dw[m->vk], hv);
  if (m->o.use_bias) {
    be->bias_grad(c->ctx, rows, w, u->dq, u->bcat);
    copy_cols(c, 1, hk, u->bcat, w, c->dw[m->qb], hk);
    be->fill(c->ctx, (size_t)hk, 0.0f, c->dw[m->kb]);
    copy_cols(c, 1, hv, u->bcat + 2 * hk, w, c->dw[m->vb], hv);
  }
  fused_input_grads(l, c, u);
}

static void zero_grads(const st_layer *l, st_layer_args *c) {
  for (int p = 0; p < l->nparams; p++)
    c->be->fill(c->ctx, st_shape_size(l->params[p].shape), 0.0f, c->dw[p]);
}

static void mha_backward(const st_layer *l, st_layer_args *c) {
  const st__mha_config *m = l->config;
  if (c->batch == 0) {
    zero_grads(l, c);
    return;
  }
  int hk = m->heads * m->kd, hv = m->heads * m->vd, B = c->batch, ki = st__mha_key_input(l);
  bool dr = drops(m, c);
  bufs u = carve(l, c, dr);
  if (dr)
    c->be->dropout_forward(c->ctx, (size_t)B * m->heads * m->tq * m->tv, m->o.dropout,
                           c->seed, c->stream, u.p, u.pd);
  project_backward(c, B * m->tq, hv, m->out, u.o, c->dy, m->ok, m->ob, u.dO, false);
  attention_backward(m, c, u, dr);
  if (u.fused) {
    fused_backward(l, c, &u);
    return;
  }
  project_backward(c, B * m->tq, m->dq, hk, c->xs[0], u.dq, m->qk, m->qb, c->dxs[0], false);
  project_backward(c, B * m->tv, m->dv, hv, c->xs[1], u.dv, m->vk, m->vb, c->dxs[1], false);
  project_backward(c, B * m->tv, m->dk, hk, c->xs[ki], u.dk, m->kk, -1, c->dxs[ki], ki == 1);
  /* key/bias: adding one vector to every key adds one constant to each row of
   * scores, which softmax ignores: its gradient is exactly 0 (summed, dKp's
   * rows give rounding noise only) */
  if (m->kb >= 0) c->be->fill(c->ctx, (size_t)hk, 0.0f, c->dw[m->kb]);
}

static void mha_options(const st_layer *l, st_layer_options *out) {
  out->mha = ((const st__mha_config *)l->config)->o;
}

static const st_layer_vtable mha_vtable = {
    .class_name = "MultiHeadAttention",
    .base_name = "multi_head_attention",
    .min_inputs = 2,
    .max_inputs = 3,
    .build = mha_build,
    .workspace_floats = mha_workspace,
    .forward = mha_forward,
    .backward = mha_backward,
    .get_options = mha_options,
    .host_loops = true,
};

st_mha_options st_multi_head_attention_default_options(int num_heads, int key_dim) {
  st_mha_options o = {
      .num_heads = num_heads, .key_dim = key_dim, .value_dim = 0, .dropout = 0.0f,
      .use_bias = true, .output_dim = 0, .use_causal_mask = false,
      .kernel_init = ST_INIT_GLOROT_UNIFORM, .bias_init = ST_INIT_ZEROS, .name = NULL,
  };
  return o;
}

/* New unbuilt MultiHeadAttention (caller owns it until added to a model). */
st_status st_multi_head_attention_ex(st_mha_options o, st_layer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  if (o.num_heads <= 0 || o.key_dim <= 0)
    return st_error(ST_ERR_INVALID, "MultiHeadAttention: num_heads %d and key_dim %d must be "
                    "positive", o.num_heads, o.key_dim);
  if (o.value_dim < 0 || o.output_dim < 0)
    return st_error(ST_ERR_INVALID, "MultiHeadAttention: value_dim %d and output_shape %d must "
                    "be positive (0: the defaults)", o.value_dim, o.output_dim);
  if (!(o.dropout >= 0.0f && o.dropout < 1.0f))
    return st_error(ST_ERR_INVALID, "MultiHeadAttention: dropout %g is outside [0, 1)",
                    (double)o.dropout);
  if ((int)o.kernel_init < 0 || o.kernel_init >= ST_INIT_COUNT || (int)o.bias_init < 0 ||
      o.bias_init >= ST_INIT_COUNT)
    return st_error(ST_ERR_INVALID, "MultiHeadAttention: invalid initializer");
  const char *name = o.name;
  o.name = NULL;
  st__mha_config m = {.o = o};
  return st__layer_new(&mha_vtable, &m, sizeof m, name, out);
}

st_status st_multi_head_attention(int num_heads, int key_dim, st_layer **out) {
  ST_REQUIRE(out);
  return st_multi_head_attention_ex(st_multi_head_attention_default_options(num_heads, key_dim),
                                    out);
}
