/* GPT-2 weights in Hugging Face's safetensors layout (GPT2LMHeadModel):
 *   transformer.wte.weight [V, C], transformer.wpe.weight [T, C],
 *   transformer.h.<i>.ln_1.weight/.bias [C],
 *   transformer.h.<i>.attn.c_attn.weight [C, 3C] (Conv1D: [in, out]; the
 *     columns q, then k, then v, heads in order), .c_attn.bias [3C],
 *   transformer.h.<i>.attn.c_proj.weight [C, C], .bias [C],
 *   transformer.h.<i>.ln_2.weight/.bias, transformer.h.<i>.mlp.c_fc.weight
 *     [C, 4C], .bias [4C], .mlp.c_proj.weight [4C, C], .bias [C],
 *   transformer.ln_f.weight/.bias [C]
 * (lm_head.weight is wte: not written, ignored when read). HF's Conv1D
 * weights are [in, out], as Keras's: only c_attn is assembled from our three
 * kernels. Reading accepts the names with or without "transformer." (the
 * hub's gpt2 file has none) and ignores other tensors (attn.bias masks);
 * wpe may have more rows than seq_len, wte more than vocab (rows beyond are
 * not read). The model is a GPT of st_gpt_create (layer names). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "nn/layer.h"
#include "strata/train.h"

const st_layer *st__gpt_layer(const st_model *m, const char *name);

typedef struct piece {
  const char *layer, *param; /* ours: layer name (a %d for the block), param name */
  int col0;                  /* first column of the HF tensor it fills */
} piece;

typedef struct hf_spec {
  const char *name;  /* HF name after "transformer.", %d = the block */
  int rows, cols;    /* HF shape (rows 0: a vector of cols) */
  int npieces;
  piece p[3];        /* each [rows, cols / npieces] */
} hf_spec;

/* The tensors of block -1 (the embeddings and ln_f) or block i. */
static int specs(const st_gpt_config *c, int block, hf_spec *s) {
  int C = c->n_embd, n = 0;
  if (block < 0) {
    s[n++] = (hf_spec){"wte.weight", c->vocab, C, 1, {{"wte", "embeddings", 0}}};
    s[n++] = (hf_spec){"wpe.weight", c->seq_len, C, 1, {{"wpe", "embeddings", 0}}};
    s[n++] = (hf_spec){"ln_f.weight", 0, C, 1, {{"ln_f", "gamma", 0}}};
    s[n++] = (hf_spec){"ln_f.bias", 0, C, 1, {{"ln_f", "beta", 0}}};
    return n;
  }
  s[n++] = (hf_spec){"h.%d.ln_1.weight", 0, C, 1, {{"h%d_ln_1", "gamma", 0}}};
  s[n++] = (hf_spec){"h.%d.ln_1.bias", 0, C, 1, {{"h%d_ln_1", "beta", 0}}};
  s[n++] = (hf_spec){"h.%d.attn.c_attn.weight", C, 3 * C, 3,
                     {{"h%d_attn", "query/kernel", 0}, {"h%d_attn", "key/kernel", C},
                      {"h%d_attn", "value/kernel", 2 * C}}};
  s[n++] = (hf_spec){"h.%d.attn.c_attn.bias", 0, 3 * C, 3,
                     {{"h%d_attn", "query/bias", 0}, {"h%d_attn", "key/bias", C},
                      {"h%d_attn", "value/bias", 2 * C}}};
  s[n++] = (hf_spec){"h.%d.attn.c_proj.weight", C, C, 1, {{"h%d_attn", "attention_output/kernel", 0}}};
  s[n++] = (hf_spec){"h.%d.attn.c_proj.bias", 0, C, 1, {{"h%d_attn", "attention_output/bias", 0}}};
  s[n++] = (hf_spec){"h.%d.ln_2.weight", 0, C, 1, {{"h%d_ln_2", "gamma", 0}}};
  s[n++] = (hf_spec){"h.%d.ln_2.bias", 0, C, 1, {{"h%d_ln_2", "beta", 0}}};
  s[n++] = (hf_spec){"h.%d.mlp.c_fc.weight", C, 4 * C, 1, {{"h%d_mlp_fc", "kernel", 0}}};
  s[n++] = (hf_spec){"h.%d.mlp.c_fc.bias", 0, 4 * C, 1, {{"h%d_mlp_fc", "bias", 0}}};
  s[n++] = (hf_spec){"h.%d.mlp.c_proj.weight", 4 * C, C, 1, {{"h%d_mlp_proj", "kernel", 0}}};
  s[n++] = (hf_spec){"h.%d.mlp.c_proj.bias", 0, C, 1, {{"h%d_mlp_proj", "bias", 0}}};
  return n;
}

/* Offset of our variable, or (size_t)-1 with the error set. */
static size_t var(const st_model *m, const piece *p, int block) {
  char name[ST_NAME_MAX];
  snprintf(name, sizeof name, p->layer, block);
  const st_layer *l = st__gpt_layer(m, name);
  for (int q = 0; l && q < l->nparams; q++)
    if (!strcmp(l->params[q].name, p->param)) return l->params[q].offset;
  st_error(ST_ERR_INVALID, "GPT safetensors: the model has no variable %s/%s", name, p->param);
  return (size_t)-1;
}

/* Move one spec between w (ours) and hf [rows, cols] (save: w -> hf). */
static st_status move(const st_model *m, const hf_spec *s, int block, float *w, float *hf, bool save) {
  size_t rows = s->rows ? (size_t)s->rows : 1, cols = (size_t)s->cols, pc = cols / (size_t)s->npieces;
  for (int k = 0; k < s->npieces; k++) {
    size_t o = var(m, &s->p[k], block);
    if (o == (size_t)-1) return ST_ERR_INVALID;
    for (size_t r = 0; r < rows; r++) {
      float *a = w + o + r * pc, *b = hf + r * cols + (size_t)s->p[k].col0;
      memcpy(save ? b : a, save ? a : b, pc * sizeof(float));
    }
  }
  return ST_OK;
}

static size_t spec_floats(const hf_spec *s) { return (size_t)(s->rows ? s->rows : 1) * (size_t)s->cols; }

/* Every spec of the model: [4 + 12 L] into *out (malloc'd). */
static int all_specs(const st_gpt_config *c, hf_spec **out) {
  int n = 0;
  hf_spec *s = malloc((size_t)(4 + 12 * c->n_layer) * sizeof *s);
  if (!s) return -1;
  n += specs(c, -1, s);
  for (int i = 0; i < c->n_layer; i++) n += specs(c, i, s + n);
  *out = s;
  return n;
}

/* The block of spec k (the first 4 are the embeddings and ln_f). */
static int block_of(int k) { return k < 4 ? -1 : (k - 4) / 12; }

st_status st_gpt_save_hf(const st_model *m, const st_gpt_config *c, const char *path) {
  if (!m || !c || !path)
    return st_error(ST_ERR_INVALID, "st_gpt_save_hf: %s is NULL", !m ? "m" : !c ? "c" : "path");
  hf_spec *s = NULL;
  int n = all_specs(c, &s);
  size_t total = 0;
  for (int k = 0; k < n; k++) total += spec_floats(&s[k]);
  float *w = malloc(st_model_weights_size(m) * sizeof(float) + 1), *buf = malloc(total * sizeof(float) + 1);
  st_named_tensor *t = calloc((size_t)(n > 0 ? n : 1), sizeof *t);
  st_status st = n < 0 || !w || !buf || !t ? st_error(ST_ERR_NOMEM, "%s: out of memory", path)
                                           : st_model_get_weights(m, w);
  size_t at = 0;
  for (int k = 0; st == ST_OK && k < n; k++) {
    char name[96];
    snprintf(name, sizeof name, s[k].name, block_of(k));
    snprintf(t[k].name, sizeof t[k].name, "transformer.%s", name);
    t[k].rank = s[k].rows ? 2 : 1;
    t[k].dims[0] = s[k].rows ? s[k].rows : s[k].cols;
    t[k].dims[1] = s[k].cols;
    t[k].data = buf + at;
    st = move(m, &s[k], block_of(k), w, buf + at, true);
    at += spec_floats(&s[k]);
  }
  const char *key = "format", *val = "pt";
  if (st == ST_OK) st = st__safetensors_write(path, t, n, &key, &val, 1);
  free(t), free(buf), free(w), free(s);
  return st;
}

/* The tensor of spec k in f (with or without "transformer."), shape checked. */
static st_status find(const st_safetensors *f, const hf_spec *s, int block, const char *path,
                      const float **out) {
  char name[96], full[128];
  snprintf(name, sizeof name, s->name, block);
  snprintf(full, sizeof full, "transformer.%s", name);
  const st_named_tensor *t = st__safetensors_find(f, full);
  if (!t) t = st__safetensors_find(f, name);
  if (!t) return st_error(ST_ERR_INVALID, "%s: GPT-2 tensor '%s' is missing", path, full);
  bool grows = !strcmp(name, "wte.weight") || !strcmp(name, "wpe.weight"); /* more rows: fine */
  bool ok = s->rows ? t->rank == 2 && t->dims[1] == s->cols &&
                          (grows ? t->dims[0] >= s->rows : t->dims[0] == s->rows)
                    : t->rank == 1 && t->dims[0] == s->cols;
  if (!ok)
    return st_error(ST_ERR_INVALID, "%s: tensor '%s' has shape [%lld%s%lld], the model (--gpt-* "
                    "flags) needs [%d%s%d]%s", path, t->name, (long long)t->dims[0],
                    t->rank > 1 ? ", " : "", t->rank > 1 ? (long long)t->dims[1] : 0LL,
                    s->rows ? s->rows : s->cols, s->rows ? ", " : "", s->rows ? s->cols : 0,
                    grows ? " (at least that many rows)" : "");
  *out = t->data;
  return ST_OK;
}

st_status st_gpt_load_hf(st_model *m, const st_gpt_config *c, const char *path) {
  if (!m || !c || !path)
    return st_error(ST_ERR_INVALID, "st_gpt_load_hf: %s is NULL", !m ? "m" : !c ? "c" : "path");
  st_safetensors f;
  memset(&f, 0, sizeof f);
  st_status st = st__safetensors_read(path, &f);
  if (st != ST_OK) return st;
  hf_spec *s = NULL;
  int n = all_specs(c, &s);
  float *w = malloc(st_model_weights_size(m) * sizeof(float) + 1);
  st = n < 0 || !w ? st_error(ST_ERR_NOMEM, "%s: out of memory", path) : st_model_get_weights(m, w);
  for (int k = 0; st == ST_OK && k < n; k++) {
    const float *src = NULL;
    if ((st = find(&f, &s[k], block_of(k), path, &src)) == ST_OK)
      st = move(m, &s[k], block_of(k), w, (float *)src, false);
  }
  if (st == ST_OK) st = st_model_set_weights(m, w);
  free(w), free(s);
  st__safetensors_free(&f);
  return st;
}
