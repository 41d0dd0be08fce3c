/* GPT-2 (Radford et al. 2019; the model of llm.c's train_gpt2.c) as a
 * functional graph:
 *   ids [T] -> wte: Embedding(vocab, C) -> + wpe: PositionEmbedding(maxT)
 *   L blocks: x + attn(ln_1(x)), then x + mlp(ln_2(x)), where attn is a
 *     causal MultiHeadAttention (H heads of C/H) and mlp Dense(4C, GELU tanh)
 *     then Dense(C)
 *   ln_f: LayerNormalization -> lm_head: ReversibleEmbedding tied to wte
 *   -> logits [T, vocab]
 * LayerNormalization epsilon 1e-5 (GPT-2's). Layer names are fixed (wte,
 * wpe, h<i>_ln_1, h<i>_attn, h<i>_ln_2, h<i>_mlp_fc, h<i>_mlp_proj, ln_f,
 * lm_head): the llm.c and Hugging Face mappings (src/io/llmc.c) find the
 * variables by them. st_gpt_init_weights gives GPT-2's initialisation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "nn/layer.h"
#include "strata/train.h"

st_gpt_config st_gpt_default_config(void) {
  return (st_gpt_config){.n_layer = 4, .n_head = 4, .n_embd = 128, .seq_len = 64, .vocab = 256};
}

st_status st_gpt_preset(const char *name, st_gpt_config *out) {
  if (!name || !out) return st_error(ST_ERR_INVALID, "st_gpt_preset: %s is NULL", name ? "out" : "name");
  if (!strcmp(name, "small")) {
    *out = st_gpt_default_config();
  } else if (!strcmp(name, "gpt2-124m")) {
    *out = (st_gpt_config){.n_layer = 12, .n_head = 12, .n_embd = 768, .seq_len = 1024,
                           .vocab = 50257};
  } else {
    return st_error(ST_ERR_INVALID, "unknown GPT preset '%s' (presets: small, gpt2-124m)", name);
  }
  return ST_OK;
}

st_status st_gpt_check_config(const st_gpt_config *c) {
  if (!c) return st_error(ST_ERR_INVALID, "st_gpt_check_config: c is NULL");
  const char *bad = c->n_layer < 1 ? "n_layer (--gpt-layers) must be >= 1"
                    : c->n_head < 1 ? "n_head (--gpt-heads) must be >= 1"
                    : c->n_embd < 1 ? "n_embd (--gpt-width) must be >= 1"
                    : c->seq_len < 1 ? "seq_len (--seq-len) must be >= 1"
                    : c->vocab < 2 ? "vocab (--vocab) must be >= 2"
                    : c->n_embd % c->n_head ? "n_embd (--gpt-width) must be a multiple of n_head (--gpt-heads)"
                    : NULL;
  return bad ? st_error(ST_ERR_INVALID, "GPT config: %s (n_layer %d, n_head %d, n_embd %d, "
                        "seq_len %d, vocab %d)", bad, c->n_layer, c->n_head, c->n_embd,
                        c->seq_len, c->vocab)
             : ST_OK;
}

/* A graph under construction: the first error latches; every layer made is
 * remembered so that a failed build frees them. */
typedef struct gpt_b {
  st_status s;
  st_layer *made[1024];
  int n;
} gpt_b;

static st_node *call(gpt_b *g, st_status made, st_layer *l, st_node *a, st_node *b) {
  if (g->s != ST_OK || made != ST_OK) {
    if (g->s == ST_OK) g->s = made;
    return NULL;
  }
  if (g->n == (int)(sizeof g->made / sizeof *g->made)) {
    st_layer_destroy(l);
    g->s = st_error(ST_ERR_INVALID, "GPT: too many layers (at most %d blocks)", 1024 / 9 - 1);
    return NULL;
  }
  g->made[g->n++] = l;
  st_node *in[2] = {a, b}, *out = NULL;
  if ((g->s = st_layer_call(l, in, b ? 2 : 1, &out)) != ST_OK) return NULL;
  return out;
}

static st_node *ln(gpt_b *g, st_node *x, const char *name) {
  st_layernorm_options o = st_layernorm_default_options();
  o.epsilon = 1e-5f;
  o.name = name;
  st_layer *l = NULL;
  st_status s = st_layernorm_ex(o, &l);
  return call(g, s, l, x, NULL);
}

static st_node *dense(gpt_b *g, st_node *x, int units, st_activation a, const char *name) {
  st_dense_options o = st_dense_default_options(units);
  o.activation = a;
  o.name = name;
  st_layer *l = NULL;
  st_status s = st_dense_ex(o, &l);
  return call(g, s, l, x, NULL);
}

static st_node *add(gpt_b *g, st_node *a, st_node *b) {
  st_layer *l = NULL;
  st_status s = st_add(&l);
  return call(g, s, l, a, b);
}

/* x + attn(ln_1(x)), then + mlp(ln_2(x)). */
static st_node *block(gpt_b *g, const st_gpt_config *c, int i, st_node *x) {
  char nm[5][32];
  const char *what[5] = {"ln_1", "attn", "ln_2", "mlp_fc", "mlp_proj"};
  for (int k = 0; k < 5; k++) snprintf(nm[k], sizeof nm[k], "h%d_%s", i, what[k]);
  st_node *h = ln(g, x, nm[0]);
  st_mha_options o = st_multi_head_attention_default_options(c->n_head, c->n_embd / c->n_head);
  o.use_causal_mask = true;
  o.name = nm[1];
  st_layer *l = NULL;
  st_status s = st_multi_head_attention_ex(o, &l);
  h = call(g, s, l, h, h);
  x = add(g, x, h);
  h = dense(g, ln(g, x, nm[2]), 4 * c->n_embd, ST_ACT_GELU_TANH, nm[3]);
  return add(g, x, dense(g, h, c->n_embd, ST_ACT_LINEAR, nm[4]));
}

static st_node *gpt_graph(gpt_b *g, const st_gpt_config *c, st_node *ids) {
  st_embedding_options eo = st_embedding_default_options(c->vocab, c->n_embd);
  eo.name = "wte";
  st_layer *wte = NULL, *l = NULL;
  st_status s = st_embedding_ex(eo, &wte);
  st_node *tok = call(g, s, wte, ids, NULL);
  st_position_embedding_options po = st_position_embedding_default_options(c->seq_len);
  po.name = "wpe";
  s = st_position_embedding_ex(po, &l);
  st_node *x = add(g, tok, call(g, s, l, tok, NULL));
  for (int i = 0; i < c->n_layer; i++) x = block(g, c, i, x);
  x = ln(g, x, "ln_f");
  if (g->s != ST_OK) return NULL;
  s = st_reversible_embedding(wte, &l);
  if (s == ST_OK) snprintf(l->name, sizeof l->name, "lm_head"), l->named_by_user = true;
  return call(g, s, l, x, NULL);
}

st_status st_gpt_create(const st_gpt_config *c, const st_model_options *o, st_model **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_gpt_create: out is NULL");
  *out = NULL;
  if (!o || !c) return st_error(ST_ERR_INVALID, "st_gpt_create: %s is NULL", o ? "c" : "o");
  st_status s = st_gpt_check_config(c);
  if (s != ST_OK) return s;
  gpt_b *g = calloc(1, sizeof *g);
  if (!g) return st_error(ST_ERR_NOMEM, "st_gpt_create: out of memory");
  st_node *x = NULL;
  if ((s = st_input(st_shape1(c->seq_len), "tokens", &x)) != ST_OK) {
    free(g);
    return s;
  }
  st_node *y = gpt_graph(g, c, x);
  st_model_options mo = *o;
  mo.name = o->name && strcmp(o->name, "sequential") ? o->name : "gpt";
  if (g->s == ST_OK) g->s = st_functional_create(&x, 1, &y, 1, &mo, out);
  s = g->s;
  if (s != ST_OK) {
    for (int i = 0; i < g->n; i++) st_layer_destroy(g->made[i]);
    st_node_destroy(x);
  }
  free(g);
  return s;
}

/* The layer named `name` of m, or NULL. */
const st_layer *st__gpt_layer(const st_model *m, const char *name) {
  for (int i = 0; i < st_model_layer_count(m); i++)
    if (!strcmp(st_layer_name(st_model_layer(m, i)), name)) return st_model_layer(m, i);
  return NULL;
}

/* GPT-2's initialisation of one parameter (llm.c, nanoGPT): kernels and
 * embeddings normal(0, 0.02), wpe normal(0, 0.01) as llm.c's make_inputs,
 * residual projections (attention output, mlp_proj) normal(0, 0.02 /
 * sqrt(2 L)); LayerNorm gamma 1, every bias and beta 0. */
static void init_param(const st_layer *l, int p, int L, float *w, st_rng *rng) {
  const st_param_spec *ps = &l->params[p];
  size_t n = st_shape_size(ps->shape);
  bool resid = strstr(l->name, "mlp_proj") || (strstr(l->name, "_attn") &&
                                              !strcmp(ps->name, "attention_output/kernel"));
  float std = resid ? 0.02f / sqrtf(2.0f * (float)L) : !strcmp(l->name, "wpe") ? 0.01f : 0.02f;
  bool normal = !strcmp(ps->name, "embeddings") || strstr(ps->name, "kernel");
  float fill = !strcmp(ps->name, "gamma") ? 1.0f : 0.0f;
  for (size_t i = 0; i < n; i++) w[ps->offset + i] = normal ? std * st_rng_normal(rng) : fill;
}

st_status st_gpt_init_weights(st_model *m, uint64_t seed) {
  if (!m) return st_error(ST_ERR_INVALID, "st_gpt_init_weights: m is NULL");
  size_t n = st_model_weights_size(m);
  float *w = malloc((n ? n : 1) * sizeof *w);
  if (!w) return st_error(ST_ERR_NOMEM, "st_gpt_init_weights: out of memory");
  st_status s = st_model_get_weights(m, w);
  int L = 0;
  for (int i = 0; i < st_model_layer_count(m); i++)
    L += strstr(st_layer_name(st_model_layer(m, i)), "_mlp_fc") != NULL;
  for (int i = 0; s == ST_OK && i < st_model_layer_count(m); i++) {
    const st_layer *l = st_model_layer(m, i);
    for (int p = 0; p < l->nparams; p++) {
      st_rng rng = st_rng_make(seed, st__layer_init_stream(i, p));
      if (l->params[p].trainable) init_param(l, p, L ? L : 1, w, &rng);
    }
  }
  if (s == ST_OK) s = st_model_set_weights(m, w);
  free(w);
  return s;
}
