/* GPT-2 (st_gpt_create) and llm.c checkpoints (src/io/llmc.c):
 *  - the model's shape and variable count (GPT-2's formula, the head tied:
 *    no variable of its own);
 *  - llm.c file -> model -> file is byte-identical;
 *  - bad checkpoints are refused naming the file and the field (magic, a
 *    config field that disagrees, maxT below seq_len, a short file);
 *  - mirrored x2 trains the weights of one device (up to float rounding);
 *  - the warmup + cosine schedule and the clip factor. The comparison with
 *    PyTorch is tests/test_gpt_torch.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "strata/strata.h"

static const st_gpt_config CFG = {2, 2, 32, 16, 64};

static st_strategy *strategies[8]; /* destroyed after their models (done) */
static int nstrategies;

static void done(void) {
  while (nstrategies) st_strategy_destroy(strategies[--nstrategies]);
}

static st_model *gpt(st_strategy_kind kind, int replicas, uint64_t seed) {
  st_strategy_options so = st_strategy_default_options(kind);
  so.threads = 1;
  if (replicas) so.replicas = replicas;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options mo = st_model_default_options(st_shape1(CFG.seq_len));
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_gpt_create(&CFG, &mo, &m));
  strategies[nstrategies++] = s;
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = st_optimizer_default_options(ST_OPT_ADAMW);
  co.optimizer.torch_form = true;
  co.optimizer.global_clipnorm = 1.0f;
  CHECK_OK(st_model_compile(m, &co));
  CHECK_OK(st_gpt_init_weights(m, seed));
  return m;
}

static void test_shape(void) {
  st_model *m = gpt(ST_STRATEGY_ONE_DEVICE, 0, 1);
  size_t C = 32, L = 2, V = 64, T = 16;
  CHECK_EQ(st_model_param_count(m, true), V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C);
  st_shape out = st_model_output_shape(m);
  CHECK(out.rank == 2 && out.dims[0] == 16 && out.dims[1] == 64);
  st_model_destroy(m);
  done();
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return NULL;
  char *b = malloc(1 << 20);
  *n = fread(b, 1, 1 << 20, f);
  fclose(f);
  return b;
}

static void test_round_trip(void) {
  st_model *a = gpt(ST_STRATEGY_ONE_DEVICE, 0, 1), *b = gpt(ST_STRATEGY_ONE_DEVICE, 0, 2);
  CHECK_OK(st_gpt_save_llmc(a, &CFG, "gpt_a.bin"));
  CHECK_OK(st_gpt_load_llmc(b, &CFG, "gpt_a.bin"));
  CHECK_OK(st_gpt_save_llmc(b, &CFG, "gpt_b.bin"));
  size_t na = 0, nb = 0;
  char *fa = slurp("gpt_a.bin", &na), *fb = slurp("gpt_b.bin", &nb);
  CHECK_EQ(na, (size_t)1024 + 4 * (64 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32));
  CHECK(na == nb && fa && fb && memcmp(fa, fb, na) == 0);
  int32_t h[8];
  memcpy(h, fa, sizeof h);
  CHECK(h[0] == 20240326 && h[1] == 3 && h[2] == 16 && h[3] == 64 && h[4] == 2 && h[5] == 2 &&
        h[6] == 32 && h[7] == 64);
  free(fa), free(fb);
  st_model_destroy(a), st_model_destroy(b);
  done();
}

/* gpt_a.bin with int32 `v` at header index i, or cut to `len` bytes. */
static void bad_file(int i, int32_t v, size_t len) {
  size_t n = 0;
  char *b = slurp("gpt_a.bin", &n);
  if (i >= 0) memcpy(b + 4 * i, &v, 4);
  FILE *f = fopen("gpt_bad.bin", "wb");
  fwrite(b, 1, len ? len : n, f);
  fclose(f);
  free(b);
}

static void test_bad_checkpoints(void) {
  st_model *m = gpt(ST_STRATEGY_ONE_DEVICE, 0, 1);
  CHECK_OK(st_gpt_save_llmc(m, &CFG, "gpt_a.bin"));
  struct { int i; int32_t v; size_t len; const char *needle; } cases[] = {
      {0, 1234, 0, "field magic is 1234"},      {1, 2, 0, "field version is 2"},
      {4, 3, 0, "field L (layers, --gpt-layers) is 3"}, {6, 48, 0, "field C (width, --gpt-width) is 48"},
      {3, 50, 0, "field V (vocab, --vocab) is 50"}, {2, 8, 0, "maxT is 8, below"},
      {-1, 0, 5000, "is short"},               {-1, 0, 100, "shorter than its 1024-byte header"}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    bad_file(cases[k].i, cases[k].v, cases[k].len);
    CHECK(st_gpt_load_llmc(m, &CFG, "gpt_bad.bin") == ST_ERR_INVALID);
    CHECK_MSG(strstr(st_last_error(), cases[k].needle) && strstr(st_last_error(), "gpt_bad.bin"),
              "case %zu: %s", k, st_last_error());
  }
  CHECK(st_gpt_load_llmc(m, &CFG, "no_such_gpt.bin") == ST_ERR_IO);
  st_gpt_config bad = CFG;
  bad.n_head = 3;
  CHECK(st_gpt_check_config(&bad) == ST_ERR_INVALID && strstr(st_last_error(), "--gpt-heads"));
  st_model_destroy(m);
  done();
}

/* Three steps on the same batches: one device and mirrored x2 agree. */
static void train3(st_model *m, float *w) {
  enum { B = 4 };
  static float x[B * 16], y[B * 16];
  for (int i = 0; i < B * 16; i++) x[i] = (float)((i * 7) % 64), y[i] = (float)((i * 7 + 7) % 64);
  st_tensor xt = {ST_F32, 2, {B, 16}, x}, yt = {ST_F32, 2, {B, 16}, y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&xt, &yt, 1.0f, true, &ds));
  CHECK_OK(st_dataset_batch(ds, B, false, &ds));
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 3;
  st_history h = {0};
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  CHECK(h.epochs == 3 && h.logs[2].loss < h.logs[0].loss);
  CHECK_OK(st_model_get_weights(m, w));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
}

static void test_mirrored(void) {
  st_model *a = gpt(ST_STRATEGY_ONE_DEVICE, 0, 1), *b = gpt(ST_STRATEGY_MIRRORED, 2, 1);
  size_t n = st_model_weights_size(a);
  float *wa = malloc(n * sizeof *wa), *wb = malloc(n * sizeof *wb);
  train3(a, wa);
  train3(b, wb);
  double worst = 0;
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)wa[i] - wb[i]));
  CHECK_MSG(worst < 1e-5, "mirrored x2 vs one device: max |dw| %g", worst);
  free(wa), free(wb);
  st_model_destroy(a), st_model_destroy(b);
  done();
}

/* The GPT with AdamW at a constant lr (1e-12: the weights stay, to rounding). */
static st_model *gpt_lr(float lr) {
  st_model_options mo = st_model_default_options(st_shape1(CFG.seq_len));
  st_model *m = NULL;
  CHECK_OK(st_gpt_create(&CFG, &mo, &m));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = st_optimizer_default_options(ST_OPT_ADAMW);
  co.optimizer.lr = st_schedule_constant(lr);
  CHECK_OK(st_model_compile(m, &co));
  CHECK_OK(st_gpt_init_weights(m, 1));
  return m;
}

/* 4 batches of 2 windows (not shuffled), skipping `skip` batches and taking
 * `take` (0: all), repeated forever when `endless`. */
static st_dataset *windows4(int64_t skip, int64_t take, bool endless) {
  enum { N = 8, T = 16 };
  static float x[N * T], y[N * T];
  for (int i = 0; i < N * T; i++) x[i] = (float)((i * 11 + i / 5) % 64), y[i] = (float)((i * 13 + 3) % 64);
  st_tensor xt = {ST_F32, 2, {N, T}, x}, yt = {ST_F32, 2, {N, T}, y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&xt, &yt, 1.0f, true, &ds));
  CHECK_OK(st_dataset_batch(ds, 2, false, &ds));
  if (skip) CHECK_OK(st_dataset_skip(ds, skip, &ds));
  if (take) CHECK_OK(st_dataset_take(ds, take, &ds));
  if (endless) CHECK_OK(st_dataset_repeat(ds, -1, &ds));
  return ds;
}

typedef struct step_losses {
  double loss[16];
  int n;
  int64_t stop_at; /* st_request_stop after this many steps (0: never) */
} step_losses;

static st_status record_step(void *user, st_model *m, const st_batch_logs *l) {
  (void)m;
  step_losses *r = user;
  if (r->n < 16) r->loss[r->n] = l->step_loss;
  if (++r->n == r->stop_at) st_request_stop();
  return ST_OK;
}

/* epochs x spe steps on the endless 4 batches. */
static st_status fit_stream(st_model *m, step_losses *r, const char *backup, int epochs, int spe) {
  st_dataset *ds = windows4(0, 0, true);
  st_callback cb = {.user = r, .on_batch_end = record_step};
  st_fit_options fo = st_fit_default_options();
  fo.epochs = epochs, fo.steps_per_epoch = spe;
  fo.callbacks = &cb, fo.ncallbacks = 1;
  fo.backup_dir = backup;
  fo.backup_every_steps = backup ? 1 : 0;
  st_history h = {0};
  st_status s = st_model_fit(m, ds, &fo, &h);
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  return s;
}

/* st_batch_logs.step_loss: with lr 0 each step's own loss is its batch's
 * (as st_model_evaluate gives it); a run stopped inside its second epoch
 * and resumed from its backup (a new process) logs the uninterrupted run's
 * step losses from the first step after the resume on (the running mean's
 * sums before it come from the backup) and ends with its weights. */
static void test_step_loss(void) {
  st_model *m = gpt_lr(1e-12f);
  double want[4];
  for (int b = 0; b < 4; b++) {
    st_dataset *one = windows4(b, 1, false);
    st_eval_result ev;
    CHECK_OK(st_model_evaluate(m, one, &ev));
    want[b] = ev.loss;
    st_dataset_destroy(one);
  }
  CHECK(want[0] != want[3]);
  step_losses r = {0};
  CHECK_OK(fit_stream(m, &r, NULL, 1, 4));
  CHECK_EQ(r.n, 4);
  for (int k = 0; k < 4; k++)
    CHECK_MSG(fabs(r.loss[k] - want[k]) <= 1e-5 * want[k], "step %d: own loss %.9g, batch %d's %.9g",
              k + 1, r.loss[k], k, want[k]);
  st_model_destroy(m);
  st_model *a = gpt_lr(1e-3f), *b = gpt_lr(1e-3f), *c = gpt_lr(1e-3f);
  step_losses ra = {0}, rb = {.stop_at = 5}, rc = {0};
  CHECK_OK(fit_stream(a, &ra, NULL, 3, 3));
  CHECK(fit_stream(b, &rb, "gpt_stream_bk", 3, 3) == ST_ERR_STOPPED);
  st_clear_stop_request();
  CHECK_OK(fit_stream(c, &rc, "gpt_stream_bk", 3, 3)); /* resumes at epoch 2 after its step 2 */
  CHECK_EQ(rc.n, 4);
  CHECK(rc.n == 4 && rc.loss[0] == ra.loss[5] && rc.loss[3] == ra.loss[8]);
  size_t n = st_model_weights_size(a);
  float *wa = malloc(n * sizeof *wa), *wc = malloc(n * sizeof *wc);
  CHECK_OK(st_model_get_weights(a, wa));
  CHECK_OK(st_model_get_weights(c, wc));
  CHECK_MSG(memcmp(wa, wc, n * sizeof *wa) == 0, "resumed inside epoch 2: weights differ");
  free(wa), free(wc);
  st_model_destroy(a), st_model_destroy(b), st_model_destroy(c);
}

static void test_schedule_clip(void) {
  st_schedule s = st_schedule_constant(0.1f);
  s.kind = ST_SCHEDULE_COSINE, s.initial = 0.01f, s.warmup_steps = 10, s.warmup_target = 1.0f;
  s.decay_steps = 100, s.alpha = 0.1f;
  CHECK_OK(st_schedule_check(&s));
  CHECK_NEAR(st_schedule_lr(&s, 0), 0.01, 1e-7);
  CHECK_NEAR(st_schedule_lr(&s, 5), 0.505, 1e-6);   /* linear warmup */
  CHECK_NEAR(st_schedule_lr(&s, 10), 1.0, 1e-6);    /* the target, then cosine */
  CHECK_NEAR(st_schedule_lr(&s, 60), 0.55, 1e-6);   /* half way: (1 + 0.1) / 2 */
  CHECK_NEAR(st_schedule_lr(&s, 500), 0.1, 1e-6);   /* alpha * target */
  s.warmup_target = -1.0f;
  CHECK(st_schedule_check(&s) == ST_ERR_INVALID);
  st_optimizer_options o = st_optimizer_default_options(ST_OPT_ADAMW);
  CHECK(st_optimizer_clip_factor(&o, 100.0) == 1.0f);
  o.global_clipnorm = 2.0f;
  CHECK(st_optimizer_clip_factor(&o, 1.0) == 1.0f);
  CHECK_NEAR(st_optimizer_clip_factor(&o, 16.0), 0.5, 1e-6);
}

/* llm.c file -> model -> Hugging Face safetensors -> model -> llm.c file:
 * the same bytes; the HF names and Conv1D shapes; a missing tensor named. */
static void test_hf_round_trip(void) {
  st_model *a = gpt(ST_STRATEGY_ONE_DEVICE, 0, 1), *b = gpt(ST_STRATEGY_ONE_DEVICE, 0, 2);
  CHECK_OK(st_gpt_save_llmc(a, &CFG, "gpt_a.bin"));
  CHECK_OK(st_gpt_save_hf(a, &CFG, "gpt_hf.safetensors"));
  CHECK_OK(st_gpt_load_hf(b, &CFG, "gpt_hf.safetensors"));
  CHECK_OK(st_gpt_save_llmc(b, &CFG, "gpt_b.bin"));
  size_t na = 0, nb = 0;
  char *fa = slurp("gpt_a.bin", &na), *fb = slurp("gpt_b.bin", &nb);
  CHECK(na == nb && na > 1024 && memcmp(fa, fb, na) == 0);
  free(fa), free(fb);
  st_safetensors f;
  CHECK_OK(st__safetensors_read("gpt_hf.safetensors", &f));
  CHECK_EQ(f.n, 4 + 12 * 2);
  const st_named_tensor *t = st__safetensors_find(&f, "transformer.h.1.attn.c_attn.weight");
  CHECK(t && t->rank == 2 && t->dims[0] == 32 && t->dims[1] == 96);
  t = st__safetensors_find(&f, "transformer.h.0.mlp.c_proj.weight");
  CHECK(t && t->rank == 2 && t->dims[0] == 128 && t->dims[1] == 32);
  CHECK(st__safetensors_find(&f, "transformer.wte.weight") && st__safetensors_find(&f, "transformer.ln_f.bias"));
  st__safetensors_free(&f);
  st_gpt_config other = CFG;
  other.n_layer = 3;
  st_model_destroy(b);
  st_model_options mo = st_model_default_options(st_shape1(16));
  CHECK_OK(st_gpt_create(&other, &mo, &b));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(b, &co));
  CHECK(st_gpt_load_hf(b, &other, "gpt_hf.safetensors") == ST_ERR_INVALID &&
        strstr(st_last_error(), "'transformer.h.2.ln_1.weight' is missing"));
  st_model_destroy(a), st_model_destroy(b);
  done();
}

/* Strategies that do not honour global_clipnorm yet refuse it at compile,
 * naming it; the pipeline takes it (its norm over every stage: one device's
 * bytes, tests/test_gpt_pipeline.sh), a loss over positions and GPT's tied
 * head. */
static void test_strategy_refusals(void) {
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_PIPELINE);
  so.pipeline_stages = 2;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options mo = st_model_default_options(st_shape1(CFG.seq_len));
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_gpt_create(&CFG, &mo, &m));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer.global_clipnorm = 1.0f;
  CHECK_OK(st_model_compile(m, &co));
  st_model_destroy(m);
  st_strategy_destroy(s);
  so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  so.replicas = 2, so.shard_optimizer = true;
  CHECK_OK(st_strategy_create(&so, &s));
  mo.strategy = s;
  CHECK_OK(st_gpt_create(&CFG, &mo, &m));
  co.optimizer.global_clipnorm = 1.0f;
  CHECK(st_model_compile(m, &co) == ST_ERR_INVALID &&
        strstr(st_last_error(), "global_clipnorm is not supported by the mirrored strategy with "
                                "shard_optimizer"));
  st_model_destroy(m);
  st_strategy_destroy(s);
}

/* A checkpoint keeps a cosine schedule's warmup (st_checkpoint_save/restore):
 * a model compiled without one gets it back. */
static void test_checkpoint_warmup(void) {
  st_model *a = gpt(ST_STRATEGY_ONE_DEVICE, 0, 1);
  st_schedule w = st_schedule_constant(1e-3f);
  w.kind = ST_SCHEDULE_COSINE, w.initial = 1e-4f, w.decay_steps = 50;
  w.warmup_steps = 7, w.warmup_target = 2e-3f;
  a->net.optimizer.lr = w; /* the live schedule (model.h) */
  st_checkpoint_options co = st_checkpoint_default_options();
  CHECK_OK(st_checkpoint_save(a, "gpt_ckpt", &co));
  st_model *b = gpt(ST_STRATEGY_ONE_DEVICE, 0, 2);
  CHECK_OK(st_checkpoint_restore(b, "gpt_ckpt"));
  const st_schedule *r = &b->net.optimizer.lr;
  CHECK(r->warmup_steps == 7 && r->warmup_target == 2e-3f && r->kind == ST_SCHEDULE_COSINE);
  st_model_destroy(a), st_model_destroy(b);
  done();
}

/* The GPT as Keras JSON (st_model_to_keras_json: the head names its
 * Embedding) and back: the same variables, the same llm.c file. */
static void test_keras_json_round_trip(void) {
  st_model *a = gpt(ST_STRATEGY_ONE_DEVICE, 0, 1), *b = NULL;
  char *json = NULL;
  CHECK_OK(st_model_to_keras_json(a, &json));
  CHECK(json && strstr(json, "\"embedding\": \"wte\""));
  st_model_options mo = st_model_default_options(st_shape1(16));
  CHECK_OK(st_model_from_keras_json_text(json, strlen(json), "gpt.json", &mo, &b));
  if (b) {
    st_compile_options co = st_compile_default_options();
    co.loss = ST_LOSS_SPARSE_CE_LOGITS;
    CHECK_OK(st_model_compile(b, &co));
    size_t n = st_model_weights_size(a);
    CHECK_EQ(st_model_weights_size(b), n);
    float *w = malloc(n * sizeof *w);
    CHECK_OK(st_model_get_weights(a, w));
    CHECK_OK(st_model_set_weights(b, w));
    CHECK_OK(st_gpt_save_llmc(a, &CFG, "gpt_a.bin"));
    CHECK_OK(st_gpt_save_llmc(b, &CFG, "gpt_b.bin"));
    size_t na = 0, nb = 0;
    char *fa = slurp("gpt_a.bin", &na), *fb = slurp("gpt_b.bin", &nb);
    CHECK(na == nb && na > 1024 && memcmp(fa, fb, na) == 0);
    free(fa), free(fb), free(w);
  }
  /* a head naming no layer of the model */
  char *bad = strstr(json ? json : "", "\"embedding\": \"wte\"");
  if (bad) memcpy(bad + 14, "wtx", 3);
  st_model *c = NULL;
  CHECK(st_model_from_keras_json_text(json, strlen(json), "gpt.json", &mo, &c) == ST_ERR_FORMAT &&
        strstr(st_last_error(), "its Embedding 'wtx' is not a layer of the model"));
  free(json);
  st_model_destroy(a), st_model_destroy(b);
  done();
}

static const check_case cases[] = {CHECK_CASE(test_keras_json_round_trip), CHECK_CASE(test_checkpoint_warmup), CHECK_CASE(test_strategy_refusals), CHECK_CASE(test_hf_round_trip), CHECK_CASE(test_shape), CHECK_CASE(test_round_trip),
                                   CHECK_CASE(test_bad_checkpoints), CHECK_CASE(test_mirrored),
                                   CHECK_CASE(test_schedule_clip), CHECK_CASE(test_step_loss)};
int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
