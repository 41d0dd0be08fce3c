/* llm.c's GPT-2 checkpoint (train_gpt2.c gpt2_build_from_checkpoint): a 256
 * x int32 header (magic 20240326, version 3, maxT, V, L, NH, C, Vp) and the
 * 16 parameter tensors, float32, in its order:
 *   wte [Vp,C] wpe [maxT,C] ln1w [L,C] ln1b [L,C] qkvw [L,3C,C] qkvb [L,3C]
 *   attprojw [L,C,C] attprojb [L,C] ln2w [L,C] ln2b [L,C] fcw [L,4C,C]
 *   fcb [L,4C] fcprojw [L,C,4C] fcprojb [L,C] lnfw [C] lnfb [C]
 * llm.c's linear weights are [out, in] (PyTorch); ours are Keras's [in, out]
 * (Dense kernel), MultiHeadAttention's query/key/value kernels [C, H, C/H]
 * (= [in, out], out = h*hs + d, llm.c's order of the heads within q, k and v)
 * and attention_output/kernel [H, C/H, C] (= [in, out]): each is transposed.
 * The model is a GPT of src/train/builtin_gpt.c, found by layer names. One
 * mapping drives both directions (xfer). The caller's thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layer.h"
#include "strata/train.h"

#define LLMC_MAGIC 20240326
#define LLMC_VERSION 3

const st_layer *st__gpt_layer(const st_model *m, const char *name);

typedef struct xfer {
  float *w;         /* the model's weights (st_model_get_weights layout) */
  float *f;         /* the file's parameters (after the header) */
  size_t at;        /* floats of f consumed */
  bool save;        /* w -> f (else f -> w) */
  const st_model *m;
  st_status s;
} xfer;

/* Offset in w of parameter `pname` of layer `lname` (layer i for "h%d"). */
static size_t off(xfer *x, const char *fmt, int i, const char *pname) {
  char name[ST_NAME_MAX];
  snprintf(name, sizeof name, fmt, i);
  const st_layer *l = st__gpt_layer(x->m, name);
  for (int p = 0; l && p < l->nparams; p++)
    if (!strcmp(l->params[p].name, pname)) return l->params[p].offset;
  if (x->s == ST_OK)
    x->s = st_error(ST_ERR_INVALID, "llm.c checkpoint: the model has no variable %s/%s (not "
                    "a GPT of st_gpt_create?)", name, pname);
  return 0;
}

/* A file block of rows x cols floats and ours at o: the same layout, or
 * (transpose) ours [cols, rows]. Then `skip` file floats (padding) zeroed on
 * save, ignored on load. */
static void block(xfer *x, size_t o, int rows, int cols, bool transpose, size_t skip) {
  if (x->s != ST_OK) return;
  float *f = x->f + x->at, *w = x->w + o;
  for (size_t r = 0; r < (size_t)rows; r++)
    for (size_t c = 0; c < (size_t)cols; c++) {
      size_t wi = transpose ? c * (size_t)rows + r : r * (size_t)cols + c;
      if (x->save) f[r * (size_t)cols + c] = w[wi];
      else w[wi] = f[r * (size_t)cols + c];
    }
  x->at += (size_t)rows * (size_t)cols;
  if (x->save) memset(x->f + x->at, 0, skip * sizeof(float));
  x->at += skip;
}

/* Every layer's block of one per-layer tensor: param p of layer "h%d_<what>". */
static void per_layer(xfer *x, int L, const char *fmt, const char *p, int rows, int cols,
                      bool transpose) {
  for (int i = 0; i < L; i++) block(x, off(x, fmt, i, p), rows, cols, transpose, 0);
}

static void xfer_all(xfer *x, const st_gpt_config *c, int maxT, int Vp) {
  int L = c->n_layer, C = c->n_embd;
  block(x, off(x, "wte", 0, "embeddings"), c->vocab, C, false, (size_t)(Vp - c->vocab) * C);
  block(x, off(x, "wpe", 0, "embeddings"), c->seq_len, C, false, (size_t)(maxT - c->seq_len) * C);
  per_layer(x, L, "h%d_ln_1", "gamma", 1, C, false);
  per_layer(x, L, "h%d_ln_1", "beta", 1, C, false);
  const char *k[3] = {"query/kernel", "key/kernel", "value/kernel"};
  const char *b[3] = {"query/bias", "key/bias", "value/bias"};
  for (int i = 0; i < L; i++) /* qkvw[i]: q rows, then k, then v */
    for (int j = 0; j < 3; j++) block(x, off(x, "h%d_attn", i, k[j]), C, C, true, 0);
  for (int i = 0; i < L; i++)
    for (int j = 0; j < 3; j++) block(x, off(x, "h%d_attn", i, b[j]), 1, C, false, 0);
  per_layer(x, L, "h%d_attn", "attention_output/kernel", C, C, true);
  per_layer(x, L, "h%d_attn", "attention_output/bias", 1, C, false);
  per_layer(x, L, "h%d_ln_2", "gamma", 1, C, false);
  per_layer(x, L, "h%d_ln_2", "beta", 1, C, false);
  per_layer(x, L, "h%d_mlp_fc", "kernel", 4 * C, C, true);
  per_layer(x, L, "h%d_mlp_fc", "bias", 1, 4 * C, false);
  per_layer(x, L, "h%d_mlp_proj", "kernel", C, 4 * C, true);
  per_layer(x, L, "h%d_mlp_proj", "bias", 1, C, false);
  block(x, off(x, "ln_f", 0, "gamma"), 1, C, false, 0);
  block(x, off(x, "ln_f", 0, "beta"), 1, C, false, 0);
}

static size_t file_floats(const st_gpt_config *c, int maxT, int Vp) {
  size_t L = (size_t)c->n_layer, C = (size_t)c->n_embd;
  return (size_t)Vp * C + (size_t)maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
}

/* The header's disagreement with c, or ST_OK. */
static st_status check_header(const int32_t *h, const st_gpt_config *c, const char *path) {
  const char *field = NULL;
  long got = 0, want = 0;
  const struct { const char *name; int idx; long want; } eq[] = {
      {"magic", 0, LLMC_MAGIC}, {"version", 1, LLMC_VERSION}, {"V (vocab, --vocab)", 3, c->vocab},
      {"L (layers, --gpt-layers)", 4, c->n_layer}, {"NH (heads, --gpt-heads)", 5, c->n_head},
      {"C (width, --gpt-width)", 6, c->n_embd}};
  for (int i = 0; i < 6 && !field; i++)
    if (h[eq[i].idx] != eq[i].want) field = eq[i].name, got = h[eq[i].idx], want = eq[i].want;
  if (field)
    return st_error(ST_ERR_INVALID, "%s: llm.c checkpoint header field %s is %ld, expected %ld",
                    path, field, got, want);
  if (h[2] < c->seq_len)
    return st_error(ST_ERR_INVALID, "%s: llm.c checkpoint header field maxT is %d, below the "
                    "model's sequence length %d (--seq-len)", path, h[2], c->seq_len);
  if (h[7] < c->vocab)
    return st_error(ST_ERR_INVALID, "%s: llm.c checkpoint header field Vp (padded vocab) is "
                    "%d, below V %d", path, h[7], c->vocab);
  return ST_OK;
}

static st_status read_all(const char *path, int32_t *h, float **f, size_t *n, const st_gpt_config *c) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return st_error(ST_ERR_IO, "%s: cannot open: llm.c checkpoint", path);
  st_status s = ST_OK;
  if (fread(h, sizeof(int32_t), 256, fp) != 256)
    s = st_error(ST_ERR_INVALID, "%s: llm.c checkpoint shorter than its 1024-byte header", path);
  if (s == ST_OK) s = check_header(h, c, path);
  if (s == ST_OK) {
    *n = file_floats(c, h[2], h[7]);
    *f = malloc(*n * sizeof(float));
    if (!*f) s = st_error(ST_ERR_NOMEM, "%s: out of memory for %zu floats", path, *n);
    else if (fread(*f, sizeof(float), *n, fp) != *n)
      s = st_error(ST_ERR_INVALID, "%s: llm.c checkpoint is short: the header's config needs "
                   "%zu parameter bytes after offset 1024", path, *n * sizeof(float));
  }
  fclose(fp);
  return s;
}

st_status st_gpt_load_llmc(st_model *m, const st_gpt_config *c, const char *path) {
  if (!m || !c || !path)
    return st_error(ST_ERR_INVALID, "st_gpt_load_llmc: %s is NULL", !m ? "m" : !c ? "c" : "path");
  int32_t h[256];
  float *f = NULL, *w = malloc(st_model_weights_size(m) * sizeof(float) + 1);
  size_t n = 0;
  st_status s = w ? read_all(path, h, &f, &n, c) : st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) s = st_model_get_weights(m, w);
  if (s == ST_OK) {
    xfer x = {w, f, 0, false, m, ST_OK};
    xfer_all(&x, c, h[2], h[7]);
    s = x.s;
  }
  if (s == ST_OK) s = st_model_set_weights(m, w);
  free(f);
  free(w);
  return s;
}

typedef struct out_file {
  const int32_t *h;
  const float *f;
  size_t n;
} out_file;

static int write_llmc(FILE *fp, void *arg) {
  const out_file *o = arg;
  return fwrite(o->h, sizeof(int32_t), 256, fp) == 256 &&
                 fwrite(o->f, sizeof(float), o->n, fp) == o->n
             ? 0 : -1;
}

st_status st_gpt_save_llmc(const st_model *m, const st_gpt_config *c, const char *path) {
  if (!m || !c || !path)
    return st_error(ST_ERR_INVALID, "st_gpt_save_llmc: %s is NULL", !m ? "m" : !c ? "c" : "path");
  st_status s = st_gpt_check_config(c);
  if (s != ST_OK) return s;
  int32_t h[256] = {LLMC_MAGIC, LLMC_VERSION, c->seq_len, c->vocab, c->n_layer, c->n_head,
                    c->n_embd, (c->vocab + 63) / 64 * 64};
  size_t n = file_floats(c, h[2], h[7]);
  float *f = calloc(n, sizeof *f), *w = malloc(st_model_weights_size(m) * sizeof(float) + 1);
  if (!f || !w) s = st_error(ST_ERR_NOMEM, "%s: out of memory", path);
  if (s == ST_OK) s = st_model_get_weights(m, w);
  if (s == ST_OK) {
    xfer x = {w, f, 0, true, m, ST_OK};
    xfer_all(&x, c, h[2], h[7]);
    s = x.s;
  }
  out_file o = {h, f, n};
  if (s == ST_OK) s = st_write_file_atomic(path, write_llmc, &o);
  free(f);
  free(w);
  return s;
}
