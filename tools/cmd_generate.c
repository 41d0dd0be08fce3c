/* `strata generate --init-from MODEL.bin [--prompt TEXT] [--tokens N]
 * [--temperature X] [--top-k K] [--seed S]`: text from a GPT trained by
 * `strata train --model gpt` (its llm.c checkpoint, --save-llmc). The
 * model's config is the checkpoint's header (layers, heads, width, T,
 * vocab); tokens are bytes (vocab 256) or GPT-2 BPE with --bpe-vocab and
 * --bpe-encoder. Each new token: the last T tokens (a shorter context padded
 * at the end: causal attention keeps the padding out of earlier positions),
 * the logits at the context's last position, softmax at --temperature over
 * the --top-k most likely, a draw from the seeded RNG. The text goes to
 * stdout (the prompt first); bad input exits 2 naming the file and field. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "generate"

typedef struct gen_cfg {
  const char *init_from, *prompt, *bpe_vocab, *bpe_encoder;
  long tokens, top_k, seed;
  double temperature;
} gen_cfg;

#define STR(n, m, f, h) CLI_OPT_STR(n, m, gen_cfg, f, h)
#define INT(n, m, f, lo, hi, h) CLI_OPT_INT(n, m, gen_cfg, f, lo, hi, h)
static cli_opt gen_opts[] = {
    STR("--init-from", "FILE.bin", init_from, "the model: an llm.c checkpoint (strata train --model gpt --save-llmc)"),
    STR("--prompt", "TEXT", prompt, "the text to continue (default: a newline)"),
    INT("--tokens", "N", tokens, 1, 1 << 20, "tokens to generate (default 200)"),
    CLI_OPT_FLOAT("--temperature", "X", gen_cfg, temperature, 1e-3, 100.0, "softmax temperature (default 0.8)"),
    INT("--top-k", "K", top_k, 1, 1 << 24, "draw among the K most likely tokens (default 40)"),
    INT("--seed", "S", seed, 0, 0x7fffffffL, "the draws' RNG seed (default 0)"),
    STR("--bpe-vocab", "FILE", bpe_vocab, "GPT-2's vocab.bpe (with --bpe-encoder; default: byte tokens)"),
    STR("--bpe-encoder", "FILE", bpe_encoder, "GPT-2's encoder.json"),
};
#undef STR
#undef INT
#define NGEN ((int)(sizeof gen_opts / sizeof *gen_opts))

/* The config from an llm.c checkpoint's header (256 int32: magic 20240326,
 * version 3, maxT, V, L, NH, C, Vp). */
static bool read_config(const char *path, st_gpt_config *g) {
  int32_t h[256];
  FILE *f = fopen(path, "rb");
  size_t got = f ? fread(h, sizeof *h, 256, f) : 0;
  if (f) fclose(f);
  if (got != 256 || h[0] != 20240326 || h[1] != 3) {
    fprintf(stderr, "strata " CMD ": --init-from %s: %s\n", path,
            got != 256 ? "shorter than llm.c's 1,024-byte header"
                       : "offset 0: not an llm.c checkpoint (magic 20240326, version 3)");
    return false;
  }
  *g = (st_gpt_config){.n_layer = h[4], .n_head = h[5], .n_embd = h[6], .seq_len = h[2],
                       .vocab = h[3]};
  return true;
}

/* The next token: logits [vocab] at temperature, top k, one draw. */
static uint32_t draw(const float *logits, int vocab, const gen_cfg *c, st_rng *r, float *p) {
  int k = c->top_k < vocab ? (int)c->top_k : vocab;
  float kth = -INFINITY;
  if (k < vocab) { /* the k-th largest logit: a partial selection over a copy */
    memcpy(p, logits, (size_t)vocab * sizeof *p);
    for (int i = 0; i < k; i++) {
      int best = i;
      for (int j = i + 1; j < vocab; j++)
        if (p[j] > p[best]) best = j;
      float t = p[i];
      p[i] = p[best], p[best] = t;
    }
    kth = p[k - 1];
  }
  float mx = -INFINITY;
  for (int j = 0; j < vocab; j++)
    if (logits[j] > mx) mx = logits[j];
  double sum = 0.0;
  for (int j = 0; j < vocab; j++) {
    p[j] = logits[j] >= kth ? (float)exp((logits[j] - mx) / c->temperature) : 0.0f;
    sum += p[j];
  }
  double u = st_rng_uniform(r) * sum, acc = 0.0;
  for (int j = 0; j < vocab; j++)
    if ((acc += p[j]) > u && p[j] > 0.0f) return (uint32_t)j;
  return (uint32_t)(vocab - 1);
}

/* Logits [vocab] after the context ctx[0..n) (n <= T). */
static st_status next_logits(st_model *m, const st_gpt_config *g, const uint32_t *ctx, int n,
                             float *x, float *logits) {
  for (int t = 0; t < g->seq_len; t++) x[t] = t < n ? (float)ctx[t] : 0.0f;
  st_tensor xt = {ST_F32, 2, {1, g->seq_len}, x}, out = {0};
  st_dataset *ds = NULL;
  st_status s = st_dataset_from_tensor_slices(&xt, NULL, 1.0f, false, &ds);
  if (s == ST_OK) s = st_dataset_batch(ds, 1, false, &ds);
  if (s == ST_OK) s = st_model_predict(m, ds, &out);
  if (s == ST_OK)
    memcpy(logits, (const float *)out.data + (size_t)(n - 1) * (size_t)g->vocab,
           (size_t)g->vocab * sizeof *logits);
  st_tensor_destroy(&out);
  st_dataset_destroy(ds);
  return s;
}

static st_status generate(const gen_cfg *c, const st_gpt_config *g, st_model *m,
                          const st_tokenizer *tok) {
  const char *prompt = c->prompt ? c->prompt : "\n";
  uint32_t *ptok = NULL;
  size_t np = 0;
  st_status s = st_tokenizer_encode(tok, prompt, strlen(prompt), &ptok, &np);
  size_t cap = np + (size_t)c->tokens + 1;
  uint32_t *all = s == ST_OK ? malloc(cap * sizeof *all) : NULL;
  float *x = malloc((size_t)g->seq_len * sizeof *x), *lg = malloc((size_t)g->vocab * sizeof *lg),
        *p = malloc((size_t)g->vocab * sizeof *p);
  if (s == ST_OK && (!all || !x || !lg || !p)) s = st_error(ST_ERR_NOMEM, CMD ": out of memory");
  if (s == ST_OK && np == 0) all[np++] = 0; /* an empty prompt: token 0 */
  else if (s == ST_OK) memcpy(all, ptok, np * sizeof *all);
  fputs(prompt, stdout);
  st_rng r = st_rng_make((uint64_t)c->seed, 11);
  for (size_t n = np; s == ST_OK && n < np + (size_t)c->tokens; n++) {
    size_t first = n > (size_t)g->seq_len ? n - (size_t)g->seq_len : 0;
    s = next_logits(m, g, all + first, (int)(n - first), x, lg);
    if (s != ST_OK) break;
    all[n] = draw(lg, g->vocab, c, &r, p);
    char *text = NULL;
    size_t len = 0;
    if ((s = st_tokenizer_decode(tok, all + n, 1, &text, &len)) == ST_OK) fwrite(text, 1, len, stdout);
    free(text);
    fflush(stdout);
  }
  fputc('\n', stdout);
  free(ptok), free(all), free(x), free(lg), free(p);
  return s;
}

int cmd_generate(int argc, char **argv) {
  gen_cfg c = {.tokens = 200, .top_k = 40, .temperature = 0.8};
  int rc = cli_parse(CMD, "--init-from MODEL.bin [--prompt TEXT] [--tokens N] ...", argc, argv,
                     gen_opts, NGEN);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  if (!cli_store(CMD, gen_opts, NGEN, &c)) return EXIT_USAGE;
  if (!c.init_from) {
    fprintf(stderr, "strata " CMD ": --init-from MODEL.bin is required (strata train --model gpt "
            "--save-llmc MODEL.bin writes one)\n");
    return EXIT_USAGE;
  }
  if (!c.bpe_vocab != !c.bpe_encoder) {
    fprintf(stderr, "strata " CMD ": --bpe-vocab and --bpe-encoder go together\n");
    return EXIT_USAGE;
  }
  st_gpt_config g;
  if (!cli_check_readable(CMD, "--init-from", c.init_from) || !read_config(c.init_from, &g))
    return EXIT_USAGE;
  st_tokenizer *tok = NULL;
  st_status s = c.bpe_vocab ? st_tokenizer_create_gpt2(c.bpe_encoder, c.bpe_vocab, &tok)
                            : st_tokenizer_create_bytes(&tok);
  if (s == ST_OK && st_tokenizer_vocab_size(tok) > g.vocab)
    s = st_error(ST_ERR_INVALID, "--init-from %s: the model has %d tokens, the tokenizer %lld",
                 c.init_from, g.vocab, (long long)st_tokenizer_vocab_size(tok));
  st_model_options mo = st_model_default_options(st_shape1(g.seq_len));
  st_model *m = NULL;
  if (s == ST_OK) s = st_gpt_create(&g, &mo, &m);
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  if (s == ST_OK) s = st_model_compile(m, &co);
  if (s == ST_OK) s = st_gpt_load_llmc(m, &g, c.init_from);
  if (s == ST_OK) s = generate(&c, &g, m, tok);
  st_model_destroy(m);
  st_tokenizer_destroy(tok);
  return s == ST_OK ? EXIT_OK : cli_fail(CMD, s);
}
