/* MultiHeadAttention's plain-loop reference (see nn/attention.h): one example
 * at a time, in double, straight from the formulas of layer_attention.c's
 * comment, with no GEMM, cache or workspace. The fast layer is compared with
 * it in tests/test_gradcheck_graph.c. Host buffers only; any thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/attention.h"

/* One example's intermediate tensors (double). */
typedef struct ex {
  double *q, *k, *v; /* [Tq, H*K], [Tv, H*K], [Tv, H*V] */
  double *p;         /* [H, Tq, Tv] */
  double *o;         /* [Tq, H*V] */
} ex;

static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

static void ex_alloc(const st__mha_config *m, ex *e) {
  size_t hk = (size_t)m->heads * m->kd, hv = (size_t)m->heads * m->vd;
  e->q = dalloc(m->tq * hk), e->k = dalloc(m->tv * hk), e->v = dalloc(m->tv * hv);
  e->p = dalloc((size_t)m->heads * m->tq * m->tv), e->o = dalloc(m->tq * hv);
  ST_ASSERT(e->q && e->k && e->v && e->p && e->o);
}

static void ex_free(ex *e) { free(e->q), free(e->k), free(e->v), free(e->p), free(e->o); }

/* y[t, n] = x[t, d] W[d, n] + b for t < rows. */
static void proj(int rows, int d, int n, const float *x, const float *w, const float *b,
                 double *y) {
  for (int t = 0; t < rows; t++)
    for (int j = 0; j < n; j++) {
      double s = b ? b[j] : 0.0;
      for (int i = 0; i < d; i++) s += (double)x[(size_t)t * d + i] * w[(size_t)i * n + j];
      y[(size_t)t * n + j] = s;
    }
}

#define W(c, i) ((i) >= 0 ? (c)->w[i] : NULL)

/* Forward of example b into e (no dropout). */
static void ex_forward(const st_layer *l, const st_layer_args *c, int b, ex *e) {
  const st__mha_config *m = l->config;
  int hk = m->heads * m->kd, hv = m->heads * m->vd, ki = st__mha_key_input(l);
  proj(m->tq, m->dq, hk, c->xs[0] + (size_t)b * m->tq * m->dq, c->w[m->qk], W(c, m->qb), e->q);
  proj(m->tv, m->dk, hk, c->xs[ki] + (size_t)b * m->tv * m->dk, c->w[m->kk], W(c, m->kb), e->k);
  proj(m->tv, m->dv, hv, c->xs[1] + (size_t)b * m->tv * m->dv, c->w[m->vk], W(c, m->vb), e->v);
  double scale = 1.0 / sqrt((double)m->kd);
  for (int h = 0; h < m->heads; h++)
    for (int i = 0; i < m->tq; i++) {
      double *row = e->p + ((size_t)h * m->tq + i) * m->tv, mx = -INFINITY, sum = 0.0;
      for (int j = 0; j < m->tv; j++) {
        double s = 0.0;
        for (int d = 0; d < m->kd; d++)
          s += e->q[(size_t)i * hk + h * m->kd + d] * e->k[(size_t)j * hk + h * m->kd + d];
        row[j] = (m->o.use_causal_mask && j > i) ? -INFINITY : s * scale;
        if (row[j] > mx) mx = row[j];
      }
      for (int j = 0; j < m->tv; j++) sum += row[j] = exp(row[j] - mx);
      for (int j = 0; j < m->tv; j++) row[j] /= sum;
      for (int d = 0; d < m->vd; d++) {
        double s = 0.0;
        for (int j = 0; j < m->tv; j++) s += row[j] * e->v[(size_t)j * hv + h * m->vd + d];
        e->o[(size_t)i * hv + h * m->vd + d] = s;
      }
    }
}

void st__mha_forward_reference(const st_layer *l, st_layer_args *c) {
  const st__mha_config *m = l->config;
  int hv = m->heads * m->vd;
  ex e;
  ex_alloc(m, &e);
  for (int b = 0; b < c->batch; b++) {
    ex_forward(l, c, b, &e);
    for (int t = 0; t < m->tq; t++)
      for (int j = 0; j < m->out; j++) {
        double s = m->ob >= 0 ? c->w[m->ob][j] : 0.0;
        for (int i = 0; i < hv; i++) s += e.o[(size_t)t * hv + i] * c->w[m->ok][(size_t)i * m->out + j];
        c->y[((size_t)b * m->tq + t) * m->out + j] = (float)s;
      }
  }
  ex_free(&e);
}

/* Gradients of y = x W + b (rows x d -> n) from dy, x given as floats (xf)
 * or doubles (xd): dW += x^T dy, db += sum dy (double accumulators),
 * dx[rows, d] += dy W^T. */
static void proj_back(int rows, int d, int n, const float *xf, const double *xd,
                      const float *w, const double *dy, double *dw, double *db, double *dx) {
  for (int t = 0; t < rows; t++)
    for (int j = 0; j < n; j++) {
      double g = dy[(size_t)t * n + j];
      if (db) db[j] += g;
      for (int i = 0; i < d; i++) {
        size_t xi = (size_t)t * d + i;
        dw[(size_t)i * n + j] += (xf ? (double)xf[xi] : xd[xi]) * g;
        dx[xi] += g * w[(size_t)i * n + j];
      }
    }
}

/* Gradient accumulators of the whole call, in double. */
typedef struct acc {
  double *dw[ST_LAYER_MAX_PARAMS];
  double *dx[3];             /* one example's input gradients (query, value, key) */
  double *dy, *dO, *dq, *dk, *dv; /* one example's */
} acc;

/* From dO: dq, dk, dv of example b (e holds its forward). */
static void ex_attention_back(const st__mha_config *m, const ex *e, acc *a) {
  int hk = m->heads * m->kd, hv = m->heads * m->vd;
  double scale = 1.0 / sqrt((double)m->kd);
  double *dp = dalloc(m->tv);
  ST_ASSERT(dp);
  for (int h = 0; h < m->heads; h++)
    for (int i = 0; i < m->tq; i++) {
      const double *p = e->p + ((size_t)h * m->tq + i) * m->tv;
      double dot = 0.0;
      for (int j = 0; j < m->tv; j++) {
        double s = 0.0;
        for (int d = 0; d < m->vd; d++) {
          double g = a->dO[(size_t)i * hv + h * m->vd + d];
          s += g * e->v[(size_t)j * hv + h * m->vd + d];
          a->dv[(size_t)j * hv + h * m->vd + d] += p[j] * g;
        }
        dp[j] = s;
        dot += s * p[j];
      }
      for (int j = 0; j < m->tv; j++) {
        double ds = scale * p[j] * (dp[j] - dot);
        for (int d = 0; d < m->kd; d++) {
          a->dq[(size_t)i * hk + h * m->kd + d] += ds * e->k[(size_t)j * hk + h * m->kd + d];
          a->dk[(size_t)j * hk + h * m->kd + d] += ds * e->q[(size_t)i * hk + h * m->kd + d];
        }
      }
    }
  free(dp);
}

static void store(float *dst, const double *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

static void ex_backward(const st_layer *l, const st_layer_args *c, int b, const ex *e,
                        acc *a) {
  const st__mha_config *m = l->config;
  int hk = m->heads * m->kd, hv = m->heads * m->vd, ki = st__mha_key_input(l);
  size_t n[3] = {(size_t)m->tq * m->dq, (size_t)m->tv * m->dv, (size_t)m->tv * m->dk};
  memset(a->dq, 0, (size_t)m->tq * hk * sizeof(double));
  memset(a->dk, 0, (size_t)m->tv * hk * sizeof(double));
  memset(a->dv, 0, (size_t)m->tv * hv * sizeof(double));
  memset(a->dO, 0, (size_t)m->tq * hv * sizeof(double));
  for (int j = 0; j < 3; j++) memset(a->dx[j], 0, n[j] * sizeof(double));
  size_t ny = (size_t)m->tq * m->out;
  for (size_t i = 0; i < ny; i++) a->dy[i] = c->dy[(size_t)b * ny + i];
  proj_back(m->tq, hv, m->out, NULL, e->o, c->w[m->ok], a->dy, a->dw[m->ok],
            m->ob >= 0 ? a->dw[m->ob] : NULL, a->dO);
  ex_attention_back(m, e, a);
  const float *x[3] = {c->xs[0] + (size_t)b * n[0], c->xs[1] + (size_t)b * n[1],
                       c->xs[ki] + (size_t)b * n[2]};
  proj_back(m->tq, m->dq, hk, x[0], NULL, c->w[m->qk], a->dq, a->dw[m->qk],
            m->qb >= 0 ? a->dw[m->qb] : NULL, a->dx[0]);
  proj_back(m->tv, m->dv, hv, x[1], NULL, c->w[m->vk], a->dv, a->dw[m->vk],
            m->vb >= 0 ? a->dw[m->vb] : NULL, a->dx[1]);
  /* the key's gradient goes to xs[2], or to the value's when it is the key */
  proj_back(m->tv, m->dk, hk, x[2], NULL, c->w[m->kk], a->dk, a->dw[m->kk], NULL, a->dx[ki]);
  /* key/bias's gradient stays 0: softmax ignores a constant added to a row */
  for (int j = 0; j < l->n_inputs; j++)
    if (c->dxs[j]) store(c->dxs[j] + (size_t)b * n[j], a->dx[j], n[j]);
}

void st__mha_backward_reference(const st_layer *l, st_layer_args *c) {
  const st__mha_config *m = l->config;
  size_t hk = (size_t)m->heads * m->kd, hv = (size_t)m->heads * m->vd;
  acc a;
  ex e;
  memset(&a, 0, sizeof a);
  ex_alloc(m, &e);
  for (int p = 0; p < l->nparams; p++) a.dw[p] = dalloc(st_shape_size(l->params[p].shape));
  a.dx[0] = dalloc((size_t)m->tq * m->dq), a.dx[1] = dalloc((size_t)m->tv * m->dv);
  a.dx[2] = dalloc((size_t)m->tv * m->dk), a.dy = dalloc((size_t)m->tq * m->out);
  a.dO = dalloc(m->tq * hv), a.dq = dalloc(m->tq * hk), a.dk = dalloc(m->tv * hk);
  a.dv = dalloc(m->tv * hv);
  ST_ASSERT(a.dx[0] && a.dx[1] && a.dx[2] && a.dy && a.dO && a.dq && a.dk && a.dv);
  for (int b = 0; b < c->batch; b++) {
    ex_forward(l, c, b, &e);
    ex_backward(l, c, b, &e, &a);
  }
  for (int p = 0; p < l->nparams; p++) {
    ST_ASSERT(a.dw[p]);
    store(c->dw[p], a.dw[p], st_shape_size(l->params[p].shape));
    free(a.dw[p]);
  }
  for (int j = 0; j < 3; j++) free(a.dx[j]);
  free(a.dy), free(a.dO), free(a.dq), free(a.dk), free(a.dv);
  ex_free(&e);
}
