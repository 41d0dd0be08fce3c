/* The strata command-line tool: shared declarations of its commands, option
 * parsing and the data/report helpers. The CLI is the only place that prints
 * to stdout and decides exit codes: 0 success, 2 bad input or usage (nothing
 * written), 4 could not write an output file, 1 anything else. */
#ifndef STRATA_TOOLS_CLI_H
#define STRATA_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "strata/strata.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_PEER = 3, EXIT_WRITE = 4, EXIT_STOPPED = 5 };

/* How an option's value is stored by cli_store (the table drives parsing):
 * CLI_RAW only keeps the text (read it with cli_get); the others write the
 * field at `field` (offsetof) of the command's config struct. */
typedef enum cli_kind {
  CLI_RAW = 0, /* value text only */
  CLI_STR,     /* const char * field: the text */
  CLI_FLAG,    /* bool field: true when given */
  CLI_INT,     /* long field: an integer in [lo, hi] (cli_int) */
  CLI_FLOAT,   /* double field: a number in [lo, hi] (cli_float) */
  CLI_FN,      /* fn(cmd, name, value, field address) checks and stores */
} cli_kind;

/* Prints "strata CMD: NAME: ..." and returns false on a bad value. */
typedef bool (*cli_store_fn)(const char *cmd, const char *name, const char *value, void *field);

typedef struct cli_opt {
  const char *name;    /* "--epochs" */
  const char *metavar; /* "N"; NULL for a flag without value */
  const char *help;
  const char *value;   /* parsed value ("1" for a flag), NULL if absent */
  cli_kind kind;       /* what cli_store does with the value */
  size_t field;        /* offsetof the field in the config struct */
  double lo, hi;       /* CLI_INT, CLI_FLOAT: the accepted range */
  cli_store_fn fn;     /* CLI_FN */
} cli_opt;

/* Table rows: name, metavar, the config struct T's field, help. CLI_FIELD
 * is offsetof(T, f) that does not compile unless f has the kind's type
 * (pointer subtraction needs compatible types; sizeof does not evaluate it). */
#define CLI_FIELD(T, f, type) (offsetof(T, f) + 0 * sizeof(&((T *)0)->f - (type *)0))
#define CLI_OPT_RAW(n, m, h) {n, m, h, NULL, CLI_RAW, 0, 0, 0, NULL}
#define CLI_OPT_STR(n, m, T, f, h) {n, m, h, NULL, CLI_STR, CLI_FIELD(T, f, const char *), 0, 0, NULL}
#define CLI_OPT_FLAG(n, T, f, h) {n, NULL, h, NULL, CLI_FLAG, CLI_FIELD(T, f, bool), 0, 0, NULL}
#define CLI_OPT_INT(n, m, T, f, lo, hi, h) {n, m, h, NULL, CLI_INT, CLI_FIELD(T, f, long), lo, hi, NULL}
#define CLI_OPT_FLOAT(n, m, T, f, lo, hi, h) {n, m, h, NULL, CLI_FLOAT, CLI_FIELD(T, f, double), lo, hi, NULL}
#define CLI_OPT_FN(n, m, T, f, fn, h) {n, m, h, NULL, CLI_FN, offsetof(T, f), 0, 0, fn}

/* Parse argv[first..] into opts. Prints the error to stderr and returns
 * EXIT_USAGE on unknown options, missing values or repeats; returns -1 when
 * --help was given (help printed to stdout); else EXIT_OK. */
int cli_parse(const char *cmd, const char *usage, int argc, char **argv,
              cli_opt *opts, int nopts);
/* cli_parse that also takes up to maxpos positional arguments (those not
 * starting with '-') into pos[0..*npos); option names may be short ("-o"). */
int cli_parse_args(const char *cmd, const char *usage, int argc, char **argv,
                   cli_opt *opts, int nopts, const char **pos, int maxpos,
                   int *npos);
void cli_print_help(const char *cmd, const char *usage, const cli_opt *opts,
                    int nopts);
/* The value of option `name` (NULL when not given). A name that is not in
 * the table is a programmer error (a misspelling): it aborts, naming it. */
const char *cli_get(const cli_opt *opts, int nopts, const char *name);
/* Every given option of the table that has a kind, in table order, into
 * the config struct cfg (ranges checked, enum names parsed). Prints the
 * first bad value ("strata CMD: --x: ...") and returns false. */
bool cli_store(const char *cmd, const cli_opt *opts, int nopts, void *cfg);
/* A CLI_FN store for the library's name parsers (st_optimizer_parse, ...):
 * ST_OK, or "strata CMD: NAME: <the library's message>" and false. */
bool cli_lib_ok(const char *cmd, const char *name, st_status s);
/* Numeric option values with range checks; print "strata CMD: --x: ..." and
 * return false on bad values. */
bool cli_int(const char *cmd, const char *name, const char *v, long lo, long hi,
             long *out);
bool cli_float(const char *cmd, const char *name, const char *v, double lo,
               double hi, double *out);
/* Print "strata CMD: <message from the library>" and map a status to an exit
 * code (bad input -> 2, else 1). */
int cli_fail(const char *cmd, st_status s);
/* The directory of path exists and is writable (so outputs can be created at
 * the end); prints the problem and returns false otherwise. */
bool cli_check_writable(const char *cmd, const char *opt, const char *path);
/* path is a readable regular file (an input named on the command line: a
 * missing one is a usage error, exit 2); prints the problem otherwise. */
bool cli_check_readable(const char *cmd, const char *opt, const char *path);
/* strata train --model gpt (tools/cmd_train_gpt.c): GPT-2 on a token
 * corpus; cli_wants_gpt: "--model gpt" is among argv. */
int cmd_train_gpt(int argc, char **argv);
bool cli_wants_gpt(int argc, char **argv);
/* name ends in ".json": a Keras model file rather than a built-in model. */
bool cli_is_json_model(const char *name);

/* Fashion-MNIST style data for the built-in models. */
typedef struct cli_data {
  st_mnist raw;              /* u8 or f32 images, u8 labels, owned */
  int64_t n_train, n_val;    /* split of raw.train */
  st_dataset *train, *val, *test; /* batched pipelines */
  char fingerprint[160];     /* the training examples: count, shape, dtype and a
                                CRC32C of the first and last examples' bytes
                                (st_fit_options.data_fingerprint) */
  int batch;                 /* as loaded, to rebuild the pipelines */
  long long shuffle_buffer;  /* 0 = the whole training set, -1 = none */
  uint64_t seed;
} cli_data;
/* "fashion-mnist" means the Debian dataset directory. uint8 images are scaled
 * by 1/255, float32 images used as they are; NaN/Inf in float32 files are
 * rejected (exit 2) unless allow_nonfinite. */
int cli_load_data(const char *cmd, const char *spec, double val_split,
                  int64_t train_examples, int batch, uint64_t seed,
                  bool allow_nonfinite, cli_data *d);
void cli_free_data(cli_data *d);
/* A model with a flat input [h*w] (a Keras JSON model whose input is
 * (None, 784)) gets the images flattened, as a Keras user reshapes them; any
 * other input gets them as [h, w, 1] and fit names a mismatch. */
int cli_match_model_input(const char *cmd, cli_data *d, st_shape input);

/* --data tfrecord:PATTERN (data_tfrecord.c). */
bool cli_is_tfrecord(const char *spec);
typedef struct cli_tfrecord_tally {
  long long examples;          /* elements read, all epochs */
  unsigned long long checksum; /* sum of their CRC32Cs */
} cli_tfrecord_tally;
typedef struct cli_tfrecord_args {
  const char *pattern;    /* after "tfrecord:" */
  const char *features;   /* --features SPEC.json */
  const char *test_data;  /* --test-data tfrecord:PATTERN or NULL */
  const char *compression; /* --compression, or NULL: gzip when a pattern ends in .gz */
  bool skip_corrupt;
  long shuffle_buffer;    /* 0 = none */
  long train_examples;    /* 0 = all */
  int batch;              /* global */
  uint64_t seed;
  st_auto_shard shard;    /* FILE: this worker's files only, batch / workers each */
  int worker, workers;
  cli_tfrecord_tally *tally; /* optional, filled while training */
  int parallel_reads;     /* --num-parallel-reads: 0 = none, -1 = auto */
  const char *cache;      /* --cache FILE or NULL */
} cli_tfrecord_args;
/* The train (batched, prefetched) and test pipelines into d (raw empty). */
int cli_load_tfrecord(const char *cmd, const cli_tfrecord_args *a, cli_data *d);
/* "worker W of N read F of T files ...: E examples, S damaged records skipped" on stderr. */
void cli_tfrecord_report(const char *cmd, const cli_tfrecord_args *a, const cli_data *d);
/* --data with token shards for --model gpt (data_tokens.c): a spec ending in
 * ".bin" (a glob or a comma-separated list of globs/files; quote a glob so
 * the shell leaves it to strata) or starting with "tokens:". */
bool cli_is_token_data(const char *spec);
typedef struct cli_tokens_args {
  const char *pattern;     /* --data */
  const char *val_pattern; /* validation shards; NULL: the files of pattern named
                              "*_val*" are validation, the others training */
  int seq_len;             /* the model's T: windows of T + 1 tokens */
  int64_t vocab;           /* the model's vocabulary: a token >= it exits 2; 0 = no check */
  int batch;               /* global batch size */
  uint64_t seed;           /* the shuffle's (a new window order each epoch) */
  bool no_shuffle;         /* llm.c's order: file after file, window after window */
  st_auto_shard shard;     /* FILE with workers > 1: this worker's files, batch / workers */
  int worker, workers;
} cli_tokens_args;
/* d->train (batched, prefetched), d->val and d->test (the validation windows
 * in order, batched; NULL when there are no validation shards). Exit 2
 * naming the file, offset and value for a malformed or missing shard, a
 * token >= vocab, a shard with fewer than T + 1 tokens, no training shard. */
int cli_load_tokens(const char *cmd, const cli_tokens_args *a, cli_data *d);
/* The demo corpus (`make demo-gpt`): Debian's jargon-text, the Jargon File
 * 4.4.7 (public domain English prose, 1.7 MB). */
#define CLI_GPT_DEMO_CORPUS "/usr/share/doc/jargon-text/jargon.txt.gz"
/* --model gpt without --data: the demo corpus tokenized byte-level (vocab
 * 256, 10% validation) into a temp directory, loaded as cli_load_tokens does
 * (a->pattern ignored), and the files removed again (the mappings keep the
 * tokens: nothing is left on disk). Exit 2 saying how to install it when the
 * corpus is missing. */
int cli_load_demo_tokens(const char *cmd, const cli_tokens_args *a, cli_data *d);
/* `strata tokenize FILE... -o prefix --val-fraction F` (byte-level, nothing
 * on stdout; errors on stderr as tokenize prints them): an exit code. */
int cli_tokenize_bytes(const char *const *files, int n, const char *prefix, double val_fraction);
/* fit found no training example (s): when a's tally read none, the error
 * names the files the pattern matches (they hold no records), what this
 * worker read of them and the damaged records skipped; else s as it is. */
st_status cli_tfrecord_no_examples(const cli_tfrecord_args *a, const cli_data *d, st_status s);
/* --shuffle-buffer for IDX data: n elements (-1 = no shuffle); rebuilds d's pipelines. */
int cli_set_shuffle_buffer(const char *cmd, cli_data *d, long long n);

/* A built-in model by name, or a Keras model.to_json() FILE.json (its own
 * name kept; mo.name ignored) into *model (cmd_summary.c). */
st_status cli_create_model(const char *name, st_model_options mo, st_model **model);

/* tools/memcheck.c: before training, the estimate of its memory
 * (st_model_check_training_memory: what is still to allocate, the estimate
 * less the weights compile allocated) against what this process can have:
 * above it, "strata CMD: the model needs about X GiB for training at batch
 * B<what> (activations ..., weights+gradients+OPT slots ...); this machine
 * has Y GiB available besides the weights (MemAvailable): <fix> ..." and
 * EXIT_USAGE; above 80% of it a warning on stderr; EXIT_OK otherwise, and always when the
 * environment sets STRATA_NO_MEMORY_CHECK=1. what (may be "") follows the
 * batch ("x seq 2048"), opt names the optimizer ("adamw"), fix the flags
 * that lower the estimate. */
int cli_check_memory(const char *cmd, const st_model *m, int64_t batch, const char *what,
                     const char *opt, const char *fix);

int cmd_train(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_evaluate(int argc, char **argv);
int cmd_summary(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);

/* tools/watchdog.c: unless disarmed within `seconds`, print `what` on stderr
 * and _exit(EXIT_PEER) (MPI's start-up, which has no timeout of its own). One
 * at a time; main thread. */
void cli_watchdog_arm(double seconds, const char *what);
void cli_watchdog_disarm(void);
/* tools/rank_flags.c: every process of a multi-process job was given the
 * same of the n options opts[] (given[i]: this one was); otherwise prints
 * which rank has which and returns EXIT_USAGE on every process. A
 * collective: every process calls it, after the model is compiled. */
int cli_check_rank_flags(const char *cmd, st_strategy *s, const char *const *opts,
                         const bool *given, int n);

#endif
