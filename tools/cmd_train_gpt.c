/* strata train --model gpt: GPT-2 (src/train/builtin_gpt.c) trained on a
 * token corpus with AdamW as torch.optim.AdamW, global gradient-norm
 * clipping and warmup + cosine learning rate; llm.c checkpoints in and out.
 * The corpus: token shards (--data, llm.c's format: tools/data_tokens.c,
 * shuffled windows of T + 1 tokens, the *_val* files validating), else the
 * bytes of --text FILE, else the demo corpus (Debian's jargon-text) when it
 * is installed, else a generated text. From --text and the generated text
 * (gpt_corpus) examples are consecutive windows as llm.c's loader takes
 * them: example k is x = tokens [k T, k T + T), y = tokens [k T + 1,
 * k T + T + 1) (ids as floats); the last tenth of the windows validates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "report.h"

typedef struct gpt_cfg {
  const char *model, *preset, *text, *data, *init_from, *save_llmc, *save_hf, *save, *report, *csv;
  const char *backup_dir, *stage_boundaries;
  long pipeline_stages, micro_batches;
  st_pipeline_schedule schedule;
  long layers, heads, width, seq_len, vocab;
  long steps, eval_every, batch, seed, threads, warmup, replicas, log_every, backup_every;
  double lr, wd, clip, min_lr_frac;
  st_strategy_kind strategy;
  bool quiet, no_shuffle;
  bool chief; /* this process prints and writes (multi_worker_mirrored: worker 0) */
  const st_strategy *st; /* the run's (--report: the pipeline's stages) */
} gpt_cfg;

static bool store_strategy(const char *cmd, const char *name, const char *v, void *f) {
  return cli_lib_ok(cmd, name, st_strategy_kind_parse(v, f));
}
static bool store_schedule(const char *cmd, const char *name, const char *v, void *f) {
  return cli_lib_ok(cmd, name, st_pipeline_schedule_parse(v, f));
}

#define STR(n, m, f, h) CLI_OPT_STR(n, m, gpt_cfg, f, h)
#define INT(n, m, f, lo, hi, h) CLI_OPT_INT(n, m, gpt_cfg, f, lo, hi, h)
#define FLOAT(n, m, f, lo, hi, h) CLI_OPT_FLOAT(n, m, gpt_cfg, f, lo, hi, h)
static cli_opt gpt_opts[] = {
    STR("--model", "gpt", model, "gpt: GPT-2 (these options; other models: 'strata train --help')"),
    STR("--gpt-preset", "NAME", preset, "small (default: 4 layers, 4 heads, width 128, T 64, vocab 256) or gpt2-124m (12, 12, 768, T 1024, vocab 50257); the flags below override it"),
    INT("--gpt-layers", "L", layers, 1, 1000, "transformer blocks"),
    INT("--gpt-heads", "H", heads, 1, 4096, "attention heads (a divisor of the width)"),
    INT("--gpt-width", "C", width, 1, 1 << 16, "embedding width"),
    INT("--seq-len", "T", seq_len, 1, 1 << 20, "tokens per example (and positions of the model)"),
    INT("--vocab", "V", vocab, 2, 1 << 24, "vocabulary size (256 for bytes)"),
    STR("--data", "SHARDS", data, "token shards in llm.c's format ('dir/name_*.bin', quoted; files named *_val* validate; strata tokenize makes them); default: --text, else the demo corpus (Debian's jargon-text) when installed, else a generated text"),
    STR("--text", "FILE", text, "train on the bytes of FILE (needs --vocab >= 256; default: a generated text)"),
    INT("--steps", "N", steps, 1, 1L << 40, "optimizer steps (default 200)"),
    INT("--eval-every", "N", eval_every, 1, 1L << 40, "validation loss and a progress line every N steps (default 20, or --steps when fewer; --steps must be a multiple of it)"),
    INT("--log-every", "N", log_every, 1, 1L << 40, "every N-th step's own loss (not the running mean) on a line 'step K: step_loss X - T ms' (T: the step's wall time) and in --report's \"steps\" (default off)"),
    INT("--batch-size", "B", batch, 1, 1 << 20, "global batch size in sequences (default 8)"),
    FLOAT("--lr", "X", lr, 1e-12, 1e6, "peak learning rate (default 3e-4)"),
    FLOAT("--weight-decay", "X", wd, 0.0, 1e6, "AdamW's decoupled weight decay, as torch.optim.AdamW (default 0, as llm.c)"),
    FLOAT("--clip-norm", "X", clip, 1e-12, 1e12, "clip the gradients to global L2 norm X (torch clip_grad_norm_, Keras global_clipnorm; default off)"),
    INT("--warmup-steps", "N", warmup, 0, 1L << 40, "learning rate: linear warmup over N steps, then cosine decay to --min-lr-fraction of --lr at --steps (Keras CosineDecay with warmup; default 0: constant --lr)"),
    FLOAT("--min-lr-fraction", "F", min_lr_frac, 0.0, 1.0, "with --warmup-steps: the final learning rate as a fraction of --lr (default 0.1)"),
    INT("--seed", "S", seed, 0, 0x7fffffffL, "weights, shuffling (default 0)"),
    INT("--threads", "N", threads, 1, 1024, "one_device: compute threads (default: all cores)"),
    CLI_OPT_FN("--strategy", "NAME", gpt_cfg, strategy, store_strategy, "one_device (default), mirrored, multi_worker_mirrored (under mpirun: token shards split by file, else each worker its slice of every batch) or pipeline (stages in threads, or one per process under mpirun: every process reads every batch; the output head's table, tied to wte, kept by the first and last stages)"),
    INT("--pipeline-stages", "S", pipeline_stages, 1, ST_MAX_REPLICAS, "pipeline: stages in one process (default 2; under mpirun: one per process)"),
    STR("--stage-boundaries", "LIST", stage_boundaries, "pipeline: layer indices where stages 1.. start (default: balanced by FLOPs + parameter bytes; 'strata summary --model gpt' numbers the layers)"),
    INT("--micro-batches", "M", micro_batches, 1, 1 << 20, "pipeline: micro-batches per global batch (default: one per stage)"),
    CLI_OPT_FN("--pipeline-schedule", "NAME", gpt_cfg, schedule, store_schedule, "pipeline: gpipe (default) or 1f1b"),
    INT("--replicas", "N", replicas, 1, ST_MAX_REPLICAS, "mirrored: replicas (default: one per core)"),
    STR("--init-from", "FILE", init_from, "start from an llm.c checkpoint (gpt2_124M.bin format; its header must match the config) or, for a FILE.safetensors, Hugging Face GPT-2 weights (transformer.h.0.attn.c_attn.weight, ...)"),
    STR("--save-llmc", "FILE.bin", save_llmc, "write the trained weights as an llm.c checkpoint"),
    STR("--save-hf", "FILE", save_hf, "write the trained weights as safetensors with Hugging Face GPT-2 names and layouts"),
    STR("--backup-dir", "DIR", backup_dir, "BackupAndRestore: back up every --eval-every steps (and --backup-every N) into DIR; a run killed (even with kill -9) and started again with the same flags resumes there, to the bytes of an uninterrupted run; removed when training completes"),
    INT("--backup-every", "N", backup_every, 1, 1L << 40, "with --backup-dir: also back up every N steps"),
    STR("--report", "FILE", report, "write a JSON report of the run (per-stretch loss, token accuracy, val_loss, lr; 'strata plot' draws it)"),
    STR("--csv", "FILE", csv, "write each --log-every step's own loss as CSV rows 'step,loss' (every step without --log-every; after a resume, the steps this run trained)"),
    STR("--save", "FILE", save, "write the trained weights as safetensors (strata's names)"),
    CLI_OPT_FLAG("--no-shuffle", gpt_cfg, no_shuffle, "token shards in llm.c's order (file after file, window after window; row b of step k = tokens [k B T + b T, ... + T])"),
    CLI_OPT_FLAG("--quiet", gpt_cfg, quiet, "no progress output"),
};
#undef STR
#undef INT
#undef FLOAT
#define NGPT ((int)(sizeof gpt_opts / sizeof *gpt_opts))

/* The corpus: tokens [*n] (malloc'd floats). The token-shard dataset plugs in
 * here. Without --text: a generated text of short sentences (seeded), so the
 * model has something to learn. */
static int gpt_corpus(const gpt_cfg *c, int vocab, float **out, size_t *n) {
  unsigned char *bytes = NULL;
  size_t len = 0;
  if (c->text) {
    FILE *f = fopen(c->text, "rb");
    if (!f) {
      fprintf(stderr, "strata train: --text %s: cannot open\n", c->text);
      return EXIT_USAGE;
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    bytes = malloc(sz > 0 ? (size_t)sz : 1);
    len = bytes && sz > 0 ? fread(bytes, 1, (size_t)sz, f) : 0;
    fclose(f);
  } else {
    static const char *const w[] = {"the", "a", "cat", "dog", "bird", "sat", "ran", "flew",
                                    "on", "under", "over", "mat", "tree", "house", "red",
                                    "small", "big", "and", "then", "slept"};
    len = 1 << 20;
    bytes = malloc(len);
    st_rng r = st_rng_make((uint64_t)c->seed, 7);
    size_t at = 0;
    while (bytes && at + 16 < len) {
      const char *s = w[st_rng_below(&r, 20)];
      at += (size_t)snprintf((char *)bytes + at, len - at, "%s%s", s, st_rng_below(&r, 8) ? " " : ". ");
    }
    len = at;
  }
  if (!bytes) return cli_fail("train", st_error(ST_ERR_NOMEM, "corpus: out of memory"));
  *out = malloc((len ? len : 1) * sizeof(float));
  for (size_t i = 0; *out && i < len; i++) (*out)[i] = (float)(bytes[i] % (unsigned)vocab);
  free(bytes);
  *n = len;
  return *out ? EXIT_OK : cli_fail("train", st_error(ST_ERR_NOMEM, "corpus: out of memory"));
}

/* The config: the preset, then the flags given. */
static bool gpt_config(const gpt_cfg *c, st_gpt_config *g) {
  st_status s = st_gpt_preset(c->preset ? c->preset : "small", g);
  if (s != ST_OK) {
    fprintf(stderr, "strata train: --gpt-preset: %s\n", st_last_error());
    return false;
  }
  if (c->layers) g->n_layer = (int)c->layers;
  if (c->heads) g->n_head = (int)c->heads;
  if (c->width) g->n_embd = (int)c->width;
  if (c->seq_len) g->seq_len = (int)c->seq_len;
  if (c->vocab) g->vocab = (int)c->vocab;
  if (st_gpt_check_config(g) != ST_OK) {
    fprintf(stderr, "strata train: %s\n", st_last_error());
    return false;
  }
  if (c->text && g->vocab < 256) {
    fprintf(stderr, "strata train: --text: byte tokens need --vocab >= 256 (got %d)\n", g->vocab);
    return false;
  }
  return true;
}

/* --steps in stretches of --eval-every (fit's epochs: whole ones): one
 * stretch when --eval-every is above --steps; a remainder is refused (it
 * would train the rest of a stretch beyond --steps). */
static bool check_stretches(gpt_cfg *c) {
  if (c->eval_every > c->steps) c->eval_every = c->steps;
  if (c->steps % c->eval_every == 0) return true;
  long g = c->steps, e = c->eval_every; /* their gcd: a length that divides --steps */
  while (e) {
    long t = g % e;
    g = e, e = t;
  }
  fprintf(stderr, "strata train: --steps %ld is not a multiple of --eval-every %ld (validation "
          "comes after stretches of equal length: %ld steps would run); give --eval-every %ld "
          "or --steps %ld\n", c->steps, c->eval_every,
          (c->steps / c->eval_every + 1) * c->eval_every, g, c->steps - c->steps % c->eval_every);
  return false;
}

static bool parse_gpt(int argc, char **argv, gpt_cfg *c, int *rc) {
  memset(c, 0, sizeof *c);
  c->steps = 200, c->eval_every = 20, c->batch = 8, c->lr = 3e-4, c->min_lr_frac = 0.1;
  c->strategy = ST_STRATEGY_ONE_DEVICE;
  *rc = cli_parse("train", "--model gpt [--gpt-preset NAME] [--text FILE] [--steps N] ...", argc,
                  argv, gpt_opts, NGPT);
  if (*rc) {
    if (*rc < 0) *rc = EXIT_OK;
    return false;
  }
  *rc = EXIT_USAGE;
  if (!cli_store("train", gpt_opts, NGPT, c)) return false;
  if (c->strategy != ST_STRATEGY_ONE_DEVICE && c->strategy != ST_STRATEGY_MIRRORED &&
      c->strategy != ST_STRATEGY_MULTI_WORKER_MIRRORED && c->strategy != ST_STRATEGY_PIPELINE) {
    fprintf(stderr, "strata train: --strategy: --model gpt trains under one_device, mirrored, "
            "multi_worker_mirrored or pipeline (for now)\n");
    return false;
  }
  if ((c->pipeline_stages || c->micro_batches || c->stage_boundaries || c->schedule) &&
      c->strategy != ST_STRATEGY_PIPELINE) {
    fprintf(stderr, "strata train: --pipeline-stages, --stage-boundaries, --micro-batches and "
            "--pipeline-schedule need --strategy pipeline\n");
    return false;
  }
  if (!check_stretches(c)) return false;
  if (c->warmup && c->warmup >= c->steps) {
    fprintf(stderr, "strata train: --warmup-steps %ld must be below --steps %ld\n", c->warmup, c->steps);
    return false;
  }
  if (c->backup_every && !c->backup_dir) {
    fprintf(stderr, "strata train: --backup-every needs --backup-dir\n");
    return false;
  }
  if (c->data && c->text) {
    fprintf(stderr, "strata train: --data and --text are two corpora: give one\n");
    return false;
  }
  if (c->data && !cli_is_token_data(c->data)) {
    fprintf(stderr, "strata train: --data %s: --model gpt reads token shards ('dir/name_*.bin', "
            "made by strata tokenize)\n", c->data);
    return false;
  }
  if ((c->text && !cli_check_readable("train", "--text", c->text)) ||
      (c->init_from && !cli_check_readable("train", "--init-from", c->init_from)) ||
      !cli_check_writable("train", "--save-llmc", c->save_llmc) ||
      !cli_check_writable("train", "--save-hf", c->save_hf) ||
      !cli_check_writable("train", "--save", c->save) ||
      !cli_check_writable("train", "--report", c->report) ||
      !cli_check_writable("train", "--csv", c->csv))
    return false;
  *rc = EXIT_OK;
  return true;
}

/* Windows [first, first + count) of the corpus as a batched dataset. */
static st_status windows(const float *tok, int T, int64_t first, int64_t count, int batch,
                         uint64_t seed, bool train, st_dataset **out) {
  st_tensor x = {ST_F32, 2, {count, T}, NULL}, y = {ST_F32, 2, {count, T}, NULL};
  float *xs = malloc((size_t)(count * T) * sizeof(float)), *ys = malloc((size_t)(count * T) * sizeof(float));
  st_status s = xs && ys ? ST_OK : st_error(ST_ERR_NOMEM, "corpus: out of memory");
  for (int64_t k = 0; s == ST_OK && k < count; k++) {
    memcpy(xs + k * T, tok + (first + k) * T, (size_t)T * sizeof(float));
    memcpy(ys + k * T, tok + (first + k) * T + 1, (size_t)T * sizeof(float));
  }
  x.data = xs, y.data = ys;
  st_dataset *d = NULL;
  if (s == ST_OK) s = st_dataset_from_tensor_slices(&x, &y, 1.0f, true, &d);
  free(xs);
  free(ys);
  if (s == ST_OK && train) s = st_dataset_shuffle(d, count, seed, true, &d);
  if (s == ST_OK) s = st_dataset_batch(d, batch, train, &d);
  if (s == ST_OK && train) s = st_dataset_repeat(d, -1, &d);
  *out = s == ST_OK ? d : NULL;
  return s;
}

/* AdamW as torch.optim.AdamW (eps 1e-8), --clip-norm, warmup + cosine. */
static st_optimizer_options gpt_optimizer(const gpt_cfg *c) {
  st_optimizer_options o = st_optimizer_default_options(ST_OPT_ADAMW);
  o.torch_form = true;
  o.epsilon = 1e-8f;
  o.weight_decay = (float)c->wd;
  o.global_clipnorm = (float)c->clip;
  o.lr = st_schedule_constant((float)c->lr);
  if (c->warmup > 0) {
    o.lr.kind = ST_SCHEDULE_COSINE;
    o.lr.initial = (float)(c->lr / (double)c->warmup);
    o.lr.warmup_steps = c->warmup;
    o.lr.warmup_target = (float)c->lr;
    o.lr.decay_steps = c->steps - c->warmup;
    o.lr.alpha = (float)c->min_lr_frac;
  }
  return o;
}

/* Token shards are read from the files (--data, or the demo corpus). */
static bool reads_shards(const gpt_cfg *c) {
  return c->data || (!c->text && access(CLI_GPT_DEMO_CORPUS, R_OK) == 0);
}

/* Token shards are split by file when loaded (each worker batches its own
 * files), so fit must not shard them again: auto-shard off. An in-memory
 * corpus keeps AUTO (fit gives each worker its slice of every batch). */
static st_status gpt_strategy(const gpt_cfg *c, st_strategy **st) {
  st_strategy_options so = st_strategy_default_options(c->strategy);
  so.threads = (int)c->threads;
  so.replicas = (int)c->replicas;
  so.pipeline_stages = (int)c->pipeline_stages;
  so.stage_boundaries = c->stage_boundaries;
  so.micro_batches = (int)c->micro_batches;
  so.pipeline_schedule = c->schedule;
  if (reads_shards(c)) so.auto_shard = ST_AUTO_SHARD_OFF;
  return st_strategy_create(&so, st);
}

static st_status gpt_model(const gpt_cfg *c, const st_gpt_config *g, st_strategy *st,
                           st_model **m) {
  st_model_options mo = st_model_default_options(st_shape1(g->seq_len));
  mo.seed = (uint64_t)c->seed;
  mo.strategy = st;
  st_status s = st_gpt_create(g, &mo, m);
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = gpt_optimizer(c);
  if (s == ST_OK) s = st_model_compile(*m, &co);
  return s;
}

/* The weights: --init-from's file, else the seed's (after the memory check:
 * the model's buffers are not touched before it). */
static st_status gpt_weights(const gpt_cfg *c, const st_gpt_config *g, st_model *m) {
  size_t n = c->init_from ? strlen(c->init_from) : 0;
  bool hf = n > 12 && !strcmp(c->init_from + n - 12, ".safetensors");
  return !c->init_from ? st_gpt_init_weights(m, (uint64_t)c->seed)
         : hf ? st_gpt_load_hf(m, g, c->init_from)
              : st_gpt_load_llmc(m, g, c->init_from);
}

/* Refuse a run that cannot fit (exit 2: tools/memcheck.c). */
static int gpt_memory(const gpt_cfg *c, const st_gpt_config *g, const st_model *m) {
  char what[48];
  snprintf(what, sizeof what, " x seq %d", g->seq_len);
  return cli_check_memory("train", m, c->batch, what, "AdamW",
                          "lower --batch-size or --seq-len, or split the model over processes "
                          "with --strategy pipeline under mpirun");
}

static st_status print_epoch(void *user, st_model *m, const st_epoch_logs *l) {
  (void)m;
  const gpt_cfg *c = user;
  printf("step %lld: loss %.4f - val_loss %.4f - lr %.3g - %.0f ms/step\n",
         (long long)((l->epoch + 1) * c->eval_every), l->loss, l->val_loss, l->lr,
         l->steps ? 1000.0 * l->seconds / (double)l->steps : 0.0);
  fflush(stdout);
  return ST_OK;
}

/* A growing string. */
typedef struct sbuf {
  char *p;
  size_t len, cap;
} sbuf;

static bool sbuf_add(sbuf *b, const char *s, size_t n) {
  if (b->len + n + 2 > b->cap) { /* room for "]" and NUL */
    size_t cap = 2 * b->cap + n + 4096;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->len, s, n + 1);
  b->len += n;
  return true;
}

/* --log-every and --csv: each step's own loss (st_batch_logs.step_loss,
 * fit's: right on the first step after a resume too, where a mean recovered
 * from the running means lacked the mean before it), printed and kept for
 * the report as "[[step, loss], ...]" and for the CSV as rows. */
typedef struct step_log {
  const gpt_cfg *c;
  double t_prev; /* when the previous step ended (or the stretch began) */
  sbuf json, csv;
} step_log;

/* The clock restarts at each stretch so a step's time leaves out the
 * validation that ended the stretch before it. */
static st_status log_stretch_begin(void *user, st_model *m, int epoch) {
  (void)m, (void)epoch;
  ((step_log *)user)->t_prev = st_now_seconds();
  return ST_OK;
}

static st_status log_step(void *user, st_model *m, const st_batch_logs *l) {
  (void)m;
  step_log *sl = user;
  double own = l->step_loss, now = st_now_seconds(), ms = 1000.0 * (now - sl->t_prev);
  sl->t_prev = now;
  long long k = (long long)l->epoch * sl->c->eval_every + l->step + 1;
  const gpt_cfg *c = sl->c;
  if (k % (c->log_every ? c->log_every : 1)) return ST_OK;
  if (c->log_every && !c->quiet) printf("step %lld: step_loss %.6f - %.1f ms\n", k, own, ms);
  char item[64];
  int n = snprintf(item, sizeof item, "%s[%lld, %.9g]", sl->json.len > 1 ? ", " : "", k, own);
  if (c->log_every && !sbuf_add(&sl->json, item, (size_t)n))
    return st_error(ST_ERR_NOMEM, "--log-every: out of memory");
  n = snprintf(item, sizeof item, "%lld,%.9g\n", k, own);
  if (c->csv && !sbuf_add(&sl->csv, item, (size_t)n))
    return st_error(ST_ERR_NOMEM, "--csv: out of memory");
  return ST_OK;
}

/* st_write_file_atomic's fill: the CSV's rows. */
static int fill_csv(FILE *f, void *user) {
  const sbuf *b = user;
  return fputs("step,loss\n", f) < 0 || fwrite(b->p, 1, b->len, f) != b->len ? -1 : 0;
}

/* The in-memory corpus's windows: the training set (shuffled, repeated) and
 * the last tenth for validation. */
static int corpus_sets(const gpt_cfg *c, const st_gpt_config *g, const float *tok, size_t n,
                       st_dataset **train, st_dataset **val, int64_t *windows_train) {
  int64_t windows_n = n > 1 ? (int64_t)((n - 1) / (size_t)g->seq_len) : 0;
  int64_t nval = windows_n / 10 > 0 ? windows_n / 10 : 0;
  if (windows_n - nval < 1) {
    fprintf(stderr, "strata train: the corpus has %zu tokens: fewer than one window of "
            "--seq-len %d + 1\n", n, g->seq_len);
    return EXIT_USAGE;
  }
  st_status s = windows(tok, g->seq_len, 0, windows_n - nval, (int)c->batch, (uint64_t)c->seed,
                        true, train);
  if (s == ST_OK && nval) s = windows(tok, g->seq_len, windows_n - nval, nval, (int)c->batch, 0, false, val);
  *windows_train = windows_n - nval;
  return s == ST_OK ? EXIT_OK : cli_fail("train", s);
}

static int gpt_fit(const gpt_cfg *c, const st_gpt_config *g, st_model *m, st_dataset *train,
                   st_dataset *val, int64_t windows_train) {
  step_log sl = {.c = c, .json = {malloc(3), 1, 3}, .csv = {calloc(1, 1), 0, 1}}; /* "[" + "]" + NUL */
  if (!sl.json.p || !sl.csv.p) {
    free(sl.json.p), free(sl.csv.p);
    return cli_fail("train", st_error(ST_ERR_NOMEM, "train: out of memory"));
  }
  memcpy(sl.json.p, "[", 2);
  st_callback cb[2] = {{.user = (void *)c, .on_epoch_end = c->quiet || !c->chief ? NULL : print_epoch},
                       {.user = &sl, .on_epoch_begin = log_stretch_begin, .on_batch_end = log_step}};
  st_fit_options fo = st_fit_default_options();
  fo.epochs = (int)((c->steps + c->eval_every - 1) / c->eval_every);
  fo.steps_per_epoch = c->eval_every; /* the endless set: one stream across the stretches
                                         (step k reads batch k; a resume drops those trained) */
  fo.validation = val;
  fo.validation_steps = 8;
  fo.callbacks = cb;
  fo.ncallbacks = (c->log_every || c->csv) && c->chief ? 2 : 1;
  fo.backup_dir = c->backup_dir;
  fo.backup_every_steps = c->backup_every;
  st_history h = {0};
  double t0 = st_now_seconds();
  st_status s = st_model_fit(m, train, &fo, &h);
  if (s == ST_OK && c->report && c->chief) {
    report_info r = {.model = "gpt", .strategy = st_strategy_kind_name(c->strategy),
                     .optimizer = "adamw", .replicas = 1, .batch = (int)c->batch,
                     .seed = (uint64_t)c->seed, .lr = c->lr, .n_train = windows_train,
                     .history = &h, .wall_seconds = st_now_seconds() - t0,
                     .pipeline = c->strategy == ST_STRATEGY_PIPELINE ? c->st : NULL};
    r.test.loss = r.test.accuracy = NAN;
    memcpy(sl.json.p + sl.json.len, "]", 2); /* cap keeps room for it */
    if (report_write_extra(c->report, &r, c->log_every ? "steps" : NULL, sl.json.p) != 0)
      s = st_error(ST_ERR_IO, "--report %s: %s", c->report, st_last_error());
  }
  if (s == ST_OK && c->csv && c->chief && (s = st_write_file_atomic(c->csv, fill_csv, &sl.csv)) != ST_OK)
    s = st_error_prefix(s, "--csv: ");
  if (s == ST_OK && !c->quiet && c->chief) {
    printf("trained %lld steps on %lld windows of %d tokens", (long long)c->steps,
           (long long)windows_train, g->seq_len);
    if (h.samples_per_sec > 0) printf(": %.0f tokens/s", h.samples_per_sec * g->seq_len);
    printf("\n"); /* (the first 20 steps are not timed) */
  }
  st_history_destroy(&h);
  free(sl.json.p), free(sl.csv.p);
  return s == ST_OK ? EXIT_OK : cli_fail("train", s);
}

/* Token shards (--data, or the demo corpus when neither --data nor --text
 * is given and it is installed) or the in-memory corpus: the training set
 * (endless) and the validation set (may be NULL). */
static int gpt_data(const gpt_cfg *c, const st_gpt_config *g, const st_strategy *st,
                    cli_data *d, st_dataset **train, st_dataset **val, int64_t *windows_train) {
  if (reads_shards(c)) {
    /* the pipeline's processes read the same batches */
    int workers = c->strategy == ST_STRATEGY_PIPELINE ? 1 : st_strategy_worker_count(st);
    cli_tokens_args a = {.pattern = c->data, .seq_len = g->seq_len, .vocab = g->vocab,
                         .batch = (int)c->batch, .seed = (uint64_t)c->seed,
                         .no_shuffle = c->no_shuffle, /* each worker its files (the
                                                         strategy's auto-shard is off) */
                         .shard = workers > 1 ? ST_AUTO_SHARD_FILE : ST_AUTO_SHARD_OFF,
                         .worker = st_strategy_worker_rank(st), .workers = workers};
    int rc = c->data ? cli_load_tokens("train", &a, d) : cli_load_demo_tokens("train", &a, d);
    if (rc != EXIT_OK) return rc;
    *windows_train = d->n_train * (int64_t)c->batch;
    st_status s = st_dataset_repeat(d->train, -1, &d->train);
    *train = d->train, *val = d->val;
    return s == ST_OK ? EXIT_OK : cli_fail("train", s);
  }
  float *tok = NULL;
  size_t n = 0;
  int rc = gpt_corpus(c, g->vocab, &tok, &n);
  if (rc == EXIT_OK) rc = corpus_sets(c, g, tok, n, train, val, windows_train);
  free(tok);
  return rc;
}

/* --save-llmc, --save-hf, --save: the chief writes; a pipeline's other
 * processes take part (their stages' tensors: a gather, or streamed). */
static int gpt_save(const gpt_cfg *c, const st_gpt_config *g, const st_strategy *st,
                    st_model *m) {
  bool all = st_strategy_pipeline_stages(st) > 0 && st_strategy_worker_count(st) > 1;
  st_status s = ST_OK;
  float *w = all && !c->chief && (c->save_llmc || c->save_hf)
                 ? malloc(st_model_weights_size(m) * sizeof(float) + 1) : NULL;
  if (all && !c->chief && (c->save_llmc || c->save_hf) && !w)
    s = st_error(ST_ERR_NOMEM, "train: out of memory");
  if (s == ST_OK && c->save_llmc)
    s = c->chief ? st_gpt_save_llmc(m, g, c->save_llmc) : all ? st_model_get_weights(m, w) : ST_OK;
  if (s == ST_OK && c->save_hf)
    s = c->chief ? st_gpt_save_hf(m, g, c->save_hf) : all ? st_model_get_weights(m, w) : ST_OK;
  free(w);
  if (s == ST_OK && c->save && (c->chief || all)) s = st_model_save_weights(m, c->save);
  return s == ST_OK ? EXIT_OK : cli_fail("train", s);
}

int cmd_train_gpt(int argc, char **argv) {
  gpt_cfg c;
  int rc;
  st_gpt_config g;
  if (!parse_gpt(argc, argv, &c, &rc)) return rc;
  if (strcmp(c.model, "gpt") != 0) return EXIT_USAGE; /* cmd_train dispatches only gpt */
  if (!gpt_config(&c, &g)) return EXIT_USAGE;
  st_strategy *st = NULL;
  st_status s = gpt_strategy(&c, &st);
  if (s != ST_OK) return cli_fail("train", s);
  c.chief = st_strategy_is_chief(st);
  c.st = st;
  cli_data d;
  memset(&d, 0, sizeof d);
  st_dataset *train = NULL, *val = NULL;
  int64_t windows_train = 0;
  st_model *m = NULL;
  rc = gpt_data(&c, &g, st, &d, &train, &val, &windows_train);
  if (rc == EXIT_OK) {
    s = gpt_model(&c, &g, st, &m);
    rc = s == ST_OK ? gpt_memory(&c, &g, m) : cli_fail("train", s);
    if (rc == EXIT_OK && (s = gpt_weights(&c, &g, m)) != ST_OK) rc = cli_fail("train", s);
    if (rc == EXIT_OK) rc = gpt_fit(&c, &g, m, train, val, windows_train);
  }
  if (rc == EXIT_OK) rc = gpt_save(&c, &g, st, m);
  st_model_destroy(m);
  st_strategy_destroy(st);
  st_dataset_destroy(train);
  st_dataset_destroy(val);
  st_dataset_destroy(d.test);
  return rc;
}

/* "--model gpt" among argv: cmd_train hands the whole command here. */
bool cli_wants_gpt(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--model") && !strcmp(argv[i + 1], "gpt")) return true;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--model=gpt")) return true;
  return false;
}
