/* Internal: MultiHeadAttention's configuration after build, shared by the
 * layer (src/nn/layer_attention.c: GEMMs through the backend) and its plain
 * loop reference (src/nn/attention_ref.c), which tests/test_gradcheck_graph.c
 * compares with the layer. */
#ifndef STRATA_NN_ATTENTION_H
#define STRATA_NN_ATTENTION_H

#include "nn/layer.h"

typedef struct st__mha_config {
  st_mha_options o;           /* name NULL; value_dim/output_dim resolved by build */
  int tq, tv;                 /* query and value/key lengths */
  int dq, dk, dv, out;        /* feature sizes of query, key, value, output */
  int heads, kd, vd;          /* heads, key_dim, value_dim */
  bool fusable;               /* query, value (and key) of one shape: one
                                 buffer passed for all of them takes the
                                 fused projection (self-attention) */
  /* parameter indices (-1: no bias) */
  int qk, qb, kk, kb, vk, vb, ok, ob;
} st__mha_config;

/* The key input: xs[2] when given, else the value xs[1]. */
static inline int st__mha_key_input(const st_layer *l) { return l->n_inputs > 2 ? 2 : 1; }

/* Plain-loop reference of the layer's forward (writes c->y) and backward
 * (writes c->dxs[j] where not NULL and every c->dw[p]; recomputes the forward
 * itself, no cache or workspace). Attention dropout is not applied: for
 * comparisons with dropout 0 or inference. Host buffers only. */
void st__mha_forward_reference(const st_layer *l, st_layer_args *c);
void st__mha_backward_reference(const st_layer *l, st_layer_args *c);

/* The softmax of one (example, head) block of scores p [rows, cols] in place
 * (layer_attention_softmax.c: host loops; causal: row i keeps columns j <= i
 * when i + 1 < cols, the others 0). forward writes each row's max and 1/sum
 * to stats [rows, 2]; recompute turns the same scores into the same P from
 * them; backward turns dp (dL/dP, or dL/dPd when pd, the dropped-out P, is
 * given: kept entries scaled by keep_scale) into dS = P (dP - rowsum(dP P))
 * in place. */
void st__mha_softmax_forward(int rows, int cols, bool causal, float *p, float *stats);
void st__mha_softmax_recompute(int rows, int cols, bool causal, const float *stats, float *p);
void st__mha_softmax_backward(int rows, int cols, const float *p, const float *pd,
                              float keep_scale, float *dp);

#endif
