/* --data with token shards (llm.c's .bin, `strata tokenize`) for the
 * language model (--model gpt): the files of a glob or a comma-separated list
 * split into training and validation by name (a "_val" part, as tokenize and
 * llm.c's scripts name them) unless the validation files are given apart;
 * the training windows shuffled per epoch (or in llm.c's order), FILE-sharded
 * across multi-worker workers, batched and prefetched; the validation windows
 * in order, batched, twice (fit's validation and the final test). Every shard
 * is checked when loaded: a bad one exits 2 naming the file, offset and value. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

bool cli_is_token_data(const char *spec) {
  if (!spec) return false;
  if (!strncmp(spec, "tokens:", 7)) return true;
  size_t n = strlen(spec);
  return n > 4 && !strcmp(spec + n - 4, ".bin");
}

/* A "_val" or "-val" part in the file's name (val_000000.bin, x_val.bin, ...). */
static bool is_val_name(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  for (const char *p = strstr(base, "val"); p; p = strstr(p + 1, "val")) {
    bool before = p == base || p[-1] == '_' || p[-1] == '-' || p[-1] == '.';
    bool after = p[3] == '_' || p[3] == '-' || p[3] == '.' || p[3] == '\0';
    if (before && after) return true;
  }
  return false;
}

/* The files of spec ("tokens:" optional; comma-separated globs or names, each
 * glob sorted by name) into *files; keep: 0 all, 1 validation names only, 2
 * the others. */
static st_status list_files(const char *spec, int keep, char ***files, int *n) {
  if (!strncmp(spec, "tokens:", 7)) spec += 7;
  char *copy = strdup(spec), *save = NULL;
  *files = NULL, *n = 0;
  if (!copy) return st_error(ST_ERR_NOMEM, "out of memory");
  st_status s = ST_OK;
  for (char *part = strtok_r(copy, ",", &save); s == ST_OK && part; part = strtok_r(NULL, ",", &save)) {
    char **got = NULL;
    int m = 0;
    if ((s = st_list_files(part, false, 0, &got, &m)) != ST_OK) break;
    char **all = realloc(*files, (size_t)(*n + m) * sizeof *all);
    if (!all) s = st_error(ST_ERR_NOMEM, "out of memory listing %s", part);
    for (int i = 0; s == ST_OK && i < m; i++) {
      if (keep == 0 || is_val_name(got[i]) == (keep == 1)) all[(*n)++] = got[i];
      else free(got[i]);
      got[i] = NULL;
    }
    if (all) *files = all;
    st_list_files_free(got, m);
  }
  free(copy);
  return s;
}

/* One pipeline over files: windows, shuffled or not, FILE-sharded when
 * shards > 1, batched by batch, prefetched when train. */
static st_status pipeline(const cli_tokens_args *a, char **files, int n, bool train, int shards,
                          int batch, st_dataset **out) {
  st_token_dataset_options o = st_token_dataset_default_options();
  o.seq_len = a->seq_len;
  o.vocab = a->vocab;
  o.shuffle = train && !a->no_shuffle;
  o.seed = a->seed;
  o.num_shards = shards;
  o.shard_index = shards > 1 ? a->worker : 0;
  st_status s = st_dataset_from_token_files((const char *const *)files, n, &o, out);
  if (s == ST_OK) s = st_dataset_batch(*out, batch, false, out);
  if (s == ST_OK && train) s = st_dataset_prefetch(*out, ST_AUTOTUNE, out);
  return s;
}

/* Checks of the arguments and the file lists; EXIT_OK or EXIT_USAGE (printed). */
static int check_args(const char *cmd, const cli_tokens_args *a, int ntrain, bool file_shard) {
  if (ntrain == 0) {
    fprintf(stderr, "strata %s: --data %s: no training shards (every file matched is a "
            "validation shard: its name has \"_val\")\n", cmd, a->pattern);
    return EXIT_USAGE;
  }
  if (file_shard && a->batch % a->workers) {
    fprintf(stderr, "strata %s: --batch-size %d does not split evenly over %d workers "
            "(auto-shard file: each worker batches its own files)\n", cmd, a->batch, a->workers);
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

/* The training and validation pipelines into d. */
static int load(const char *cmd, const cli_tokens_args *a, char **tr, int ntr, char **va, int nva,
                cli_data *d) {
  bool file_shard = a->shard == ST_AUTO_SHARD_FILE && a->workers > 1;
  int rc = check_args(cmd, a, ntr, file_shard);
  if (rc != EXIT_OK) return rc;
  int shards = file_shard ? a->workers : 1;
  st_status s = pipeline(a, tr, ntr, true, shards, a->batch / shards, &d->train);
  if (s == ST_OK && nva > 0) s = pipeline(a, va, nva, false, 1, a->batch, &d->val);
  if (s == ST_OK && nva > 0) s = pipeline(a, va, nva, false, 1, a->batch, &d->test);
  if (s == ST_ERR_IO && strstr(st_last_error(), ": cannot open: ")) { /* a missing shard: bad input */
    fprintf(stderr, "strata %s: %s\n", cmd, st_last_error());
    return EXIT_USAGE;
  }
  if (s != ST_OK) return cli_fail(cmd, s);
  d->batch = a->batch;
  d->seed = a->seed;
  d->n_train = st_dataset_cardinality(d->train);
  snprintf(d->fingerprint, sizeof d->fingerprint, "tokens %.60s: %d files, %lld tokens, T %d",
           a->pattern, st_dataset_token_file_count(d->train),
           (long long)st_dataset_token_count(d->train), a->seq_len);
  return EXIT_OK;
}

int cli_load_tokens(const char *cmd, const cli_tokens_args *a, cli_data *d) {
  memset(d, 0, sizeof *d);
  char **tr = NULL, **va = NULL;
  int ntr = 0, nva = 0;
  st_status s = list_files(a->pattern, a->val_pattern ? 0 : 2, &tr, &ntr);
  if (s == ST_OK && a->val_pattern) s = list_files(a->val_pattern, 0, &va, &nva);
  else if (s == ST_OK) s = list_files(a->pattern, 1, &va, &nva);
  int rc = s == ST_OK ? load(cmd, a, tr, ntr, va, nva, d) : cli_fail(cmd, s);
  st_list_files_free(tr, ntr);
  st_list_files_free(va, nva);
  if (rc != EXIT_OK) { /* d->raw is empty: no cli_free_data (data.c) needed */
    st_dataset_destroy(d->train);
    st_dataset_destroy(d->val);
    st_dataset_destroy(d->test);
    memset(d, 0, sizeof *d);
  }
  return rc;
}

/* Remove the demo shards of dir and dir itself. */
static void remove_demo(const char *dir) {
  char pattern[4200];
  snprintf(pattern, sizeof pattern, "%s/*", dir);
  char **files = NULL;
  int n = 0;
  if (st_list_files(pattern, false, 0, &files, &n) == ST_OK)
    for (int i = 0; i < n; i++) unlink(files[i]);
  st_list_files_free(files, n);
  rmdir(dir);
}

int cli_load_demo_tokens(const char *cmd, const cli_tokens_args *a, cli_data *d) {
  memset(d, 0, sizeof *d);
  const char *corpus = CLI_GPT_DEMO_CORPUS;
  if (access(corpus, R_OK) != 0) {
    fprintf(stderr, "strata %s: no --data given and the demo corpus %s is not installed: "
            "apt-get install jargon-text (or scripts/deps.sh), or give --data 'shards/*.bin' "
            "(strata tokenize)\n", cmd, corpus);
    return EXIT_USAGE;
  }
  const char *tmp = getenv("TMPDIR");
  char dir[4096], prefix[4200], pattern[4200];
  snprintf(dir, sizeof dir, "%s/strata-demo-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "strata %s: cannot make a temp directory %s for the demo shards\n", cmd, dir);
    return EXIT_FAIL;
  }
  snprintf(prefix, sizeof prefix, "%s/jargon", dir);
  snprintf(pattern, sizeof pattern, "%s/jargon_*.bin", dir);
  int rc = cli_tokenize_bytes(&corpus, 1, prefix, 0.1);
  cli_tokens_args b = *a;
  b.pattern = pattern;
  b.val_pattern = NULL;
  if (rc == EXIT_OK) rc = cli_load_tokens(cmd, &b, d);
  remove_demo(dir);
  if (rc == EXIT_OK)
    snprintf(d->fingerprint, sizeof d->fingerprint, "tokens %s (byte-level, 10%% validation), T %d",
             corpus, a->seq_len);
  return rc;
}
