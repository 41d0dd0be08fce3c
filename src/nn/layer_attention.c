/* MultiHeadAttention (Keras class): inputs query xs[0] [batch, Tq, dq], value
 * xs[1] [batch, Tv, dv] and optional key xs[2] [batch, Tv, dk] (default: the
 * value), Keras's call order. Per example and head h:
 *   Q = query Wq + bq [Tq, H*K], Kp = key Wk + bk [Tv, H*K], V = value Wv + bv
 *   P_h = softmax(Q_h Kp_h^T / sqrt(K) (+ causal mask)) [Tq, Tv]
 *   O_h = dropout(P_h) V_h [Tq, V] (the heads side by side: O [Tq, H*V])
 *   y = O Wo + bo [Tq, out]
 * The projections are GEMMs over [batch*T, d] rows (one fused GEMM for
 * self-attention: the three inputs one buffer), the scores and the weighted
 * sums GEMMs per (example, head) through the backend table; the softmax of
 * each (example, head) block right after its score GEMM, while it is in
 * cache, in host loops (layer_attention_softmax.c: the causal mask a column
 * limit), dropout the backend's. Backward recomputes each block's P from Q
 * and Kp (the score GEMM again and one pass with the rows' max and 1/sum
 * kept by forward) and O from P and V, instead of keeping P [batch, H, Tq,
 * Tv] and O (a third of the activation memory of a transformer block);
 * with dropout P is kept (its mask is drawn over the whole batch at once).
 * The plain-loop reference is src/nn/attention_ref.c.
 *
 * cache [batch * cache_per_example], one block per tensor, batch-major:
 *   Q [batch, Tq, H*K] | Kp [batch, Tv, H*K] | V [batch, Tv, H*V]
 *   | stats [batch, H, Tq, 2] (each score row's max and 1/sum)
 *   | P [batch, H, Tq, Tv] (softmax, before dropout: dropout > 0 only)
 * workspace: O [chunk, Tq, H*V] | dO [chunk, Tq, H*V] | dQ [chunk, Tq, H*K]
 *   | dKp [chunk, Tv, H*K] | dV [chunk, Tv, H*V] | pb [Tq, Tv] (one block's
 *   P) | dpb [Tq, Tv] (its dP, then dS) | Pd [batch, H, Tq, Tv] (the
 *   dropped-out P, dropout > 0 only) | bcat [2*H*K + H*V] (see bufs); chunk
 *   = chunk_examples: forward's output projection and backward run a chunk
 *   of examples at a time, the weights' gradients summed over the chunks. */
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

/* P is kept for backward (in the cache) only with dropout: its mask is drawn
 * over the whole batch at once. */
static bool keeps_p(const st__mha_config *m) { return m->o.dropout > 0.0f; }

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
  size_t hk = (size_t)m->heads * m->kd, hv = (size_t)m->heads * m->vd;
  l->cache_per_example = m->tq * hk + m->tv * hk + m->tv * hv + (size_t)m->heads * m->tq * 2 +
                         (keeps_p(m) ? (size_t)m->heads * m->tq * m->tv : 0);
  return ST_OK;
}

/* Examples per chunk of backward (and of forward's output projection): the
 * workspace holds O, dO, dQ, dKp and dV for one chunk of ~256 rows, not for
 * the batch (the GEMMs over a chunk's rows are nearly as fast; at d_model
 * 256 the chunk's workspace fits one 2 MiB page). */
static int chunk_examples(const st__mha_config *m, int batch) {
  int t = m->tq > m->tv ? m->tq : m->tv, n = 256 / (t > 0 ? t : 1);
  n = n < 1 ? 1 : n;
  return batch < n ? (batch > 0 ? batch : 1) : n;
}

static size_t mha_workspace(const st_layer *l, int batch) {
  const st__mha_config *m = l->config;
  size_t hk = (size_t)m->heads * m->kd, hv = (size_t)m->heads * m->vd;
  size_t tt = (size_t)m->tq * m->tv, p = (size_t)m->heads * tt;
  size_t per = 2 * m->tq * hv + m->tq * hk + m->tv * hk + m->tv * hv;
  return (size_t)chunk_examples(m, batch) * per + 2 * tt +
         (keeps_p(m) ? (size_t)batch * p : 0) + 2 * hk + hv;
}

/* Pointers into the cache and workspace (see the file comment). Self-
 * attention (the inputs one buffer, fused): Q, Kp and V side by side in one
 * block [batch*T, 2*H*K + H*V] (row stride ldq = ldk = ldv), dQ, dKp, dV the
 * same (each projection's GEMM writes its columns of the block in place, so
 * the weights are never copied); otherwise three blocks of strides H*K, H*K,
 * H*V. The workspace's O, dO, dQ, dKp, dV hold one chunk of examples
 * (chunk_examples); shift() moves the others to a chunk's first example. */
typedef struct bufs {
  bool fused;
  int ldq, ldk, ldv;             /* row strides of q, k, v and of dq, dk, dv */
  float *q, *k, *v, *st, *p;     /* cache (p: NULL without dropout) */
  float *o, *pb, *dpb;           /* workspace (forward and backward) */
  float *dO, *dq, *dk, *dv;      /* workspace (backward) */
  float *pd;                     /* dropped-out P (NULL: no dropout in this call) */
  float *bcat;                   /* [2*H*K + H*V]: the biases side by side (fused),
                                    a bias gradient */
} bufs;

/* The inputs are one buffer (query == value (== key)) of one shape. */
static bool is_self(const st_layer *l, const st_layer_args *c) {
  const st__mha_config *m = l->config;
  return m->fusable && c->xs[0] == c->xs[1] && (l->n_inputs < 3 || c->xs[2] == c->xs[0]);
}

static bufs carve(const st_layer *l, const st_layer_args *c, bool dropout) {
  const st__mha_config *m = l->config;
  size_t b = (size_t)c->batch, hk = (size_t)m->heads * m->kd, hv = (size_t)m->heads * m->vd;
  size_t tt = (size_t)m->tq * m->tv, np = b * m->heads * tt;
  size_t ch = (size_t)chunk_examples(m, c->batch);
  bufs u;
  u.fused = is_self(l, c);
  u.ldq = u.ldk = (int)(u.fused ? 2 * hk + hv : hk);
  u.ldv = (int)(u.fused ? 2 * hk + hv : hv);
  u.q = c->cache, u.k = u.fused ? u.q + hk : u.q + b * m->tq * hk;
  u.v = u.fused ? u.q + 2 * hk : u.k + b * m->tv * hk;
  u.st = c->cache + b * (m->tq * hk + m->tv * hk + m->tv * hv);
  u.p = keeps_p(m) ? u.st + b * m->heads * m->tq * 2 : NULL;
  u.o = c->workspace, u.dO = u.o + ch * m->tq * hv, u.dq = u.dO + ch * m->tq * hv;
  u.dk = u.fused ? u.dq + hk : u.dq + ch * m->tq * hk;
  u.dv = u.fused ? u.dq + 2 * hk : u.dk + ch * m->tv * hk;
  u.pb = u.dq + ch * (m->tq * hk + m->tv * hk + m->tv * hv), u.dpb = u.pb + tt;
  float *pd = u.dpb + tt;
  u.pd = dropout ? pd : NULL;
  u.bcat = pd + (keeps_p(m) ? np : 0);
  return u;
}

/* u with its batch tensors (cache, Pd) starting at example b0. */
static bufs shift(const st__mha_config *m, const bufs *u, int b0) {
  bufs s = *u;
  size_t b = (size_t)b0, pb = b * m->heads * m->tq * m->tv;
  s.q += b * m->tq * u->ldq, s.k += b * m->tv * u->ldk, s.v += b * m->tv * u->ldv;
  s.st += b * m->heads * m->tq * 2;
  if (s.p) s.p += pb;
  if (s.pd) s.pd += pb;
  return s;
}

/* c for examples [b0, b0 + nb) of the call: inputs, their gradients, dy, y. */
static st_layer_args chunk_args(const st_layer *l, const st_layer_args *c, int b0, int nb) {
  st_layer_args s = *c;
  s.batch = nb;
  for (int j = 0; j < l->n_inputs; j++) {
    size_t in = (size_t)b0 * st_shape_size(l->in_shapes[j]);
    s.xs[j] = c->xs[j] + in;
    if (c->dxs[j]) s.dxs[j] = c->dxs[j] + in;
  }
  size_t out = (size_t)b0 * st_shape_size(l->out_shape);
  if (c->dy) s.dy = c->dy + out;
  if (c->y) s.y = c->y + out;
  s.x = s.xs[0], s.dx = s.dxs[0];
  return s;
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

/* One (example, head) block: s [Tq, Tv] = Q_bh Kp_bh^T / sqrt(K). */
static void block_scores(const st__mha_config *m, const st_layer_args *c, const bufs *u, int b,
                         int h, float *s) {
  c->be->gemm(c->ctx, false, true, m->tq, m->tv, m->kd, 1.0f / sqrtf((float)m->kd),
              u->q + (size_t)b * m->tq * u->ldq + h * m->kd, u->ldq,
              u->k + (size_t)b * m->tv * u->ldk + h * m->kd, u->ldk, 0.0f, s, m->tv);
}

/* O_bh [Tq, V] (columns of O [Tq, H*V]) = pd [Tq, Tv] V_bh. */
static void block_weighted_sum(const st__mha_config *m, const st_layer_args *c, const bufs *u,
                               int b, int h, const float *pd) {
  int hv = m->heads * m->vd;
  c->be->gemm(c->ctx, false, false, m->tq, m->vd, m->tv, 1.0f, pd, m->tv,
              u->v + (size_t)b * m->tv * u->ldv + h * m->vd, u->ldv, 0.0f,
              u->o + (size_t)b * m->tq * hv + h * m->vd, hv);
}

/* Row statistics of block (b, h): stats [Tq, 2]. */
static float *block_stats(const st__mha_config *m, const bufs *u, int b, int h) {
  return u->st + ((size_t)b * m->heads + h) * m->tq * 2;
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

/* Host loops only (layer.h host_loops): on a device backend the outputs
 * are NaN. */
static bool on_host(const st_layer *l, st_layer_args *c, bool backward) {
  if (st__args_host(c)) return true;
  if (!backward) {
    c->be->fill(c->ctx, (size_t)c->batch * st_shape_size(l->out_shape), NAN, c->y);
    return false;
  }
  for (int p = 0; p < l->nparams; p++)
    c->be->fill(c->ctx, st_shape_size(l->params[p].shape), NAN, c->dw[p]);
  for (int j = 0; j < l->n_inputs; j++)
    if (c->dxs[j])
      c->be->fill(c->ctx, (size_t)c->batch * st_shape_size(l->in_shapes[j]), NAN, c->dxs[j]);
  return false;
}

/* P of block (b, h) into p (the scores, then their softmax in place). */
static void block_softmax(const st__mha_config *m, const st_layer_args *c, const bufs *u, int b,
                          int h, float *p) {
  block_scores(m, c, u, b, h, p);
  st__mha_softmax_forward(m->tq, m->tv, m->o.use_causal_mask, p, block_stats(m, u, b, h));
}

static void mha_forward(const st_layer *l, st_layer_args *c) {
  const st__mha_config *m = l->config;
  if (c->batch == 0 || !on_host(l, c, false)) return;
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
  if (dr) { /* every P kept, then one dropout mask over the batch */
    for (int b = 0; b < B; b++)
      for (int h = 0; h < m->heads; h++)
        block_softmax(m, c, &u, b, h, u.p + ((size_t)b * m->heads + h) * tt);
    be->dropout_forward(c->ctx, (size_t)B * m->heads * tt, m->o.dropout, c->seed, c->stream,
                        u.p, u.pd);
  }
  int ch = chunk_examples(m, B);
  for (int b0 = 0; b0 < B; b0 += ch) { /* O of a chunk, then its rows of y */
    int nb = B - b0 < ch ? B - b0 : ch;
    bufs s = shift(m, &u, b0);
    for (int b = 0; b < nb; b++)
      for (int h = 0; h < m->heads; h++) {
        size_t blk = ((size_t)b * m->heads + h) * tt;
        float *p = s.p ? s.p + blk : s.pb;
        if (!dr) block_softmax(m, c, &s, b, h, p);
        block_weighted_sum(m, c, &s, b, h, dr ? s.pd + blk : p);
      }
    project(c, nb * m->tq, hv, m->out, s.o, c->w[m->ok], PARAM(c, m->ob),
            c->y + (size_t)b0 * m->tq * m->out);
  }
}

/* Gradients of one projection y = x W + b given dy [rows, n]: dW, db
 * (added to them when `add`: a later chunk; db through tmp [n]), and dx
 * (accumulated when `accumulate`: the key defaulting to the value). */
static void project_backward(const st_layer_args *c, int rows, int d, int n, const float *x,
                             const float *dy, int wi, int bi, float *dx, bool accumulate,
                             bool add, float *tmp) {
  const st_backend *be = c->be;
  be->gemm(c->ctx, true, false, d, n, rows, 1.0f, x, d, dy, n, add ? 1.0f : 0.0f, c->dw[wi], n);
  if (bi >= 0) {
    be->bias_grad(c->ctx, rows, n, dy, add ? tmp : c->dw[bi]);
    if (add) be->axpy(c->ctx, (size_t)n, 1.0f, tmp, c->dw[bi]);
  }
  if (dx)
    be->gemm(c->ctx, false, true, rows, d, n, 1.0f, dy, n, c->w[wi], n,
             accumulate ? 1.0f : 0.0f, dx, d);
}

/* Per (example, head): P (kept, or recomputed from the scores), O_bh = Pd
 * V_bh again (for dWo), dV_bh = Pd^T dO_bh, dPd = dO_bh V_bh^T, dS (through
 * dropout and softmax, in dpb), dQ_bh = dS Kp_bh / sqrt(K), dKp_bh = dS^T
 * Q_bh / sqrt(K). */
static void attention_backward(const st__mha_config *m, st_layer_args *c, const bufs *u) {
  const st_backend *be = c->be;
  int hv = m->heads * m->vd;
  size_t tt = (size_t)m->tq * m->tv;
  float scale = 1.0f / sqrtf((float)m->kd);
  for (int b = 0; b < c->batch; b++)
    for (int h = 0; h < m->heads; h++) {
      size_t blk = ((size_t)b * m->heads + h) * tt;
      const float *p = u->p ? u->p + blk : u->pb, *pd = u->pd ? u->pd + blk : p;
      const float *dO = u->dO + (size_t)b * m->tq * hv + h * m->vd;
      const float *v = u->v + (size_t)b * m->tv * u->ldv + h * m->vd;
      if (!u->p) {
        block_scores(m, c, u, b, h, u->pb);
        st__mha_softmax_recompute(m->tq, m->tv, m->o.use_causal_mask, block_stats(m, u, b, h),
                                  u->pb);
      }
      block_weighted_sum(m, c, u, b, h, pd);
      be->gemm(c->ctx, true, false, m->tv, m->vd, m->tq, 1.0f, pd, m->tv, dO, hv, 0.0f,
               u->dv + (size_t)b * m->tv * u->ldv + h * m->vd, u->ldv);
      be->gemm(c->ctx, false, true, m->tq, m->tv, m->vd, 1.0f, dO, hv, v, u->ldv, 0.0f, u->dpb,
               m->tv);
      st__mha_softmax_backward(m->tq, m->tv, p, u->pd ? pd : NULL,
                               u->pd ? 1.0f / (1.0f - m->o.dropout) : 1.0f, u->dpb);
      be->gemm(c->ctx, false, false, m->tq, m->kd, m->tv, scale, u->dpb, m->tv,
               u->k + (size_t)b * m->tv * u->ldk + h * m->kd, u->ldk, 0.0f,
               u->dq + (size_t)b * m->tq * u->ldq + h * m->kd, u->ldq);
      be->gemm(c->ctx, true, false, m->tv, m->kd, m->tq, scale, u->dpb, m->tv,
               u->q + (size_t)b * m->tq * u->ldq + h * m->kd, u->ldq, 0.0f,
               u->dk + (size_t)b * m->tv * u->ldk + h * m->kd, u->ldk);
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
 * ldq): each kernel's gradient by its own GEMM over its columns (added to
 * dW when `add`: a later chunk), the biases' in one pass, then the inputs'
 * (fused_input_grads). key/bias's gradient is 0 (see mha_backward). */
static void fused_backward(const st_layer *l, st_layer_args *c, const bufs *u, bool add) {
  const st__mha_config *m = l->config;
  const st_backend *be = c->be;
  int hk = m->heads * m->kd, hv = m->heads * m->vd, rows = c->batch * m->tq, w = u->ldq;
  float beta = add ? 1.0f : 0.0f;
  be->gemm(c->ctx, true, false, m->dq, hk, rows, 1.0f, c->xs[0], m->dq, u->dq, w, beta,
           c->dw[m->qk], hk);
  be->gemm(c->ctx, true, false, m->dq, hk, rows, 1.0f, c->xs[0], m->dq, u->dk, w, beta,
           c->dw[m->kk], hk);
  be->gemm(c->ctx, true, false, m->dq, hv, rows, 1.0f, c->xs[0], m->dq, u->dv, w, beta,
           c->dw[m->vk], hv);
  if (m->o.use_bias) {
    be->bias_grad(c->ctx, rows, w, u->dq, u->bcat);
    if (!add) be->fill(c->ctx, (size_t)hk, 0.0f, c->dw[m->qb]);
    if (!add) be->fill(c->ctx, (size_t)hv, 0.0f, c->dw[m->vb]);
    be->axpy(c->ctx, (size_t)hk, 1.0f, u->bcat, c->dw[m->qb]);
    be->axpy(c->ctx, (size_t)hv, 1.0f, u->bcat + 2 * hk, c->dw[m->vb]);
  }
  fused_input_grads(l, c, u);
}

static void zero_grads(const st_layer *l, st_layer_args *c) {
  for (int p = 0; p < l->nparams; p++)
    c->be->fill(c->ctx, st_shape_size(l->params[p].shape), 0.0f, c->dw[p]);
}

/* Backward of examples [b0, b0 + c->batch) of the call (c: chunk_args; u:
 * shifted to b0); the weights' gradients added to those of the chunks
 * before (add). */
static void chunk_backward(const st_layer *l, st_layer_args *c, const bufs *u, bool add) {
  const st__mha_config *m = l->config;
  const st_backend *be = c->be;
  int hk = m->heads * m->kd, hv = m->heads * m->vd, rq = c->batch * m->tq;
  int rv = c->batch * m->tv, ki = st__mha_key_input(l);
  /* dO = dy Wo^T; dWo = O^T dy once attention_backward has rebuilt O */
  be->gemm(c->ctx, false, true, rq, hv, m->out, 1.0f, c->dy, m->out, c->w[m->ok], m->out, 0.0f,
           u->dO, hv);
  attention_backward(m, c, u);
  be->gemm(c->ctx, true, false, hv, m->out, rq, 1.0f, u->o, hv, c->dy, m->out,
           add ? 1.0f : 0.0f, c->dw[m->ok], m->out);
  if (u->fused) {
    fused_backward(l, c, u, add);
    return;
  }
  project_backward(c, rq, m->dq, hk, c->xs[0], u->dq, m->qk, m->qb, c->dxs[0], false, add,
                   u->bcat);
  project_backward(c, rv, m->dv, hv, c->xs[1], u->dv, m->vk, m->vb, c->dxs[1], false, add,
                   u->bcat);
  project_backward(c, rv, m->dk, hk, c->xs[ki], u->dk, m->kk, -1, c->dxs[ki], ki == 1, add,
                   u->bcat);
}

static void mha_backward(const st_layer *l, st_layer_args *c) {
  const st__mha_config *m = l->config;
  if (c->batch == 0) {
    zero_grads(l, c);
    return;
  }
  if (!on_host(l, c, true)) return;
  const st_backend *be = c->be;
  int B = c->batch, ch = chunk_examples(m, B);
  bool dr = drops(m, c);
  bufs u = carve(l, c, dr);
  if (dr)
    be->dropout_forward(c->ctx, (size_t)B * m->heads * m->tq * m->tv, m->o.dropout, c->seed,
                        c->stream, u.p, u.pd);
  if (m->ob >= 0) be->bias_grad(c->ctx, B * m->tq, m->out, c->dy, c->dw[m->ob]);
  for (int b0 = 0; b0 < B; b0 += ch) {
    st_layer_args cc = chunk_args(l, c, b0, B - b0 < ch ? B - b0 : ch);
    bufs s = shift(m, &u, b0);
    chunk_backward(l, &cc, &s, b0 > 0);
  }
  /* key/bias: adding one vector to every key adds one constant to each row of
   * scores, which softmax ignores: its gradient is exactly 0 (summed, dKp's
   * rows give rounding noise only) */
  if (m->kb >= 0) be->fill(c->ctx, (size_t)m->heads * m->kd, 0.0f, c->dw[m->kb]);
}

/* Backward reads the inputs (the projections' kernel gradients), not the
 * output. */
static bool mha_backward_reads(const st_layer *l, bool output) { return !output; }

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
    .backward_reads = mha_backward_reads,
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
