/* strata train / evaluate / summary. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/fileio.h"
#include "cli.h"
#include "outputs.h"
#include "ps.h"
#include "report.h"

#define TRAIN_USAGE "[--model mlp|cnn] [--data fashion-mnist|DIR] [--epochs N] [--batch-size B] ..."

static cli_opt train_opts[] = {
    {"--model", "NAME", "built-in model mlp or cnn (default cnn), or a Keras model.to_json() FILE.json", NULL},
    {"--data", "SRC", "fashion-mnist (the Debian dataset, default), a DIR of MNIST-style IDX files, or tfrecord:PATTERN (TFRecord files, streamed; needs --features)", NULL},
    {"--epochs", "N", "passes over the training data (default 1)", NULL},
    {"--batch-size", "B", "global batch size (default 32, as Keras)", NULL},
    {"--optimizer", "NAME", "adam (default), sgd, rmsprop or adamw, with Keras defaults", NULL},
    {"--lr", "X", "learning rate (default: the optimizer's Keras default)", NULL},
    {"--seed", "S", "seed for weights, shuffling and dropout (default 0)", NULL},
    {"--validation-split", "F", "fraction of the training data held out for validation (default 0)", NULL},
    {"--validation-freq", "N", "validate after every Nth epoch only (Keras's validation_freq; default 1)", NULL},
    {"--train-examples", "N", "use only the first N training examples (default all)", NULL},
    {"--strategy", "NAME", "one_device (default), mirrored, central_storage, multi_worker_mirrored (under mpirun) or pipeline (model parallel)", NULL},
    {"--devices", "LIST", "mirrored/central_storage/multi_worker_mirrored: (local) devices, e.g. cpu:0,cpu:1 (one replica each); pipeline: one stage each", NULL},
    {"--replicas", "N", "the same as a replica count (default: one per core; multi_worker_mirrored: 1 per worker)", NULL},
    {"--logical-gpus", "N", "split each GPU into N logical GPUs (TensorFlow's logical devices); --devices gpu:0..gpu:(GPUs*N-1) name them", NULL},
    {"--cross-device-ops", "OPS", "mirrored: all_reduce (default) or reduction_to_one_device", NULL},
    {"--bytes-per-pack", "N", "mirrored: gradient pack size in bytes (default 4194304; 0 = one pack)", NULL},
    {"--no-overlap", NULL, "mirrored: all-reduce the packs after backward instead of during it", NULL},
    {"--shard-optimizer", NULL, "mirrored/multi_worker_mirrored: each replica keeps the optimizer slots of its shard of the weights only (ZeRO stage 1; same weights)", NULL},
    {"--collective-timeout", "S", "multi_worker_mirrored, pipeline under mpirun: fail (exit 3) when a peer has not joined a collective within S seconds (default 300)", NULL},
    {"--auto-shard", "POLICY", "multi_worker_mirrored: data (default for IDX: each worker takes its contiguous share of every global batch), off (each worker trains on its own batches) or file (tfrecord data, its default: each worker reads its own files)", NULL},
    {"--threads", "N", "one_device: compute threads (default: all cores)", NULL},
    {"--pipeline-stages", "S", "pipeline: stages on the CPU (default: one per --devices entry, else 2)", NULL},
    {"--stage-boundaries", "LIST", "pipeline: layer indices where stages 1.. start, e.g. 3,5 (default: balanced by FLOPs + parameter bytes)", NULL},
    {"--micro-batches", "M", "pipeline: micro-batches per global batch (default: one per stage)", NULL},
    {"--pipeline-schedule", "NAME", "pipeline: gpipe (default: all forwards, then all backwards) or 1f1b", NULL},
    {"--save", "FILE", "write the trained weights as safetensors", NULL},
    {"--load-weights", "FILE", "start from the weights in FILE (safetensors, as --save writes) instead of initialising them", NULL},
    {"--report", "FILE", "write a JSON report of the run", NULL},
    {"--backup-dir", "DIR", "BackupAndRestore: resume an interrupted run from DIR; deleted when done", NULL},
    {"--backup-every", "N", "with --backup-dir: also back up every N steps (default: each epoch)", NULL},
    {"--resume-anyway", NULL, "with --backup-dir: resume a backup written by a run with another model, optimizer, --lr, --seed, --batch-size or data (default: exit 2 naming the difference)", NULL},
    {"--checkpoint-dir", "DIR", "ModelCheckpoint: a checkpoint in DIR after each epoch", NULL},
    {"--keep", "N", "with --checkpoint-dir: keep the newest N checkpoints (default 3, 0 = all)", NULL},
    {"--save-best-only", NULL, "with --checkpoint-dir: only when --monitor improved", NULL},
    {"--monitor", "NAME", "val_loss (default), loss, val_accuracy or accuracy", NULL},
    {"--early-stopping", "N", "EarlyStopping: stop after N epochs without --monitor improving", NULL},
    {"--csv", "FILE", "CSVLogger: epoch,loss,accuracy,val_loss,val_accuracy,lr per epoch", NULL},
    {"--log-dir", "DIR", "TensorBoard event files (train/ and validation/)", NULL},
    {"--log-every", "N", "with --log-dir: batch figures every N steps (default 0 = per epoch only)", NULL},
    {"--plot", "FILE", "draw loss and accuracy curves as an SVG after training", NULL},
    {"--quiet", NULL, "no progress output", NULL},
    {"--allow-nonfinite", NULL, "accept NaN/Inf in float32 input files (default: exit 2 naming the element)", NULL},
    {"--features", "SPEC.json", "with --data tfrecord:PATTERN: the tf.train.Example features x and y (docs/FORMATS.md)", NULL},
    {"--test-data", "SRC", "with --data tfrecord:...: the test set, tfrecord:PATTERN (default: the Fashion-MNIST test set when the shapes match)", NULL},
    {"--compression", "C", "with --data tfrecord:...: none or gzip (default: gzip when PATTERN ends in .gz)", NULL},
    {"--skip-corrupt-records", NULL, "with --data tfrecord:...: skip and count damaged records (default: exit 2 naming file and offset)", NULL},
    {"--shuffle-buffer", "N", "shuffle buffer in elements, 0 = no shuffling (default: the whole training set; tfrecord: 10000)", NULL},
    {"--num-parallel-reads", "N", "with --data tfrecord:...: read N files at once, one record from each in turn, on N background threads (auto: one per core); as TFRecordDataset's num_parallel_reads (default: one file after the other)", NULL},
    {"--cache", "FILE", "with --data tfrecord:...: the first epoch writes the parsed examples to FILE (per worker: FILE.worker-R), later epochs and runs read it (docs/FORMATS.md)", NULL},
    {"--cluster", "FILE", "parameter_server: the cluster JSON (with --task; default: TF_CONFIG)", NULL},
    {"--task", "TYPE:INDEX", "parameter_server: with --cluster, this process's task (chief:0)", NULL},
    {"--keys", "DIR", "parameter_server: CURVE keys from 'strata keygen DIR' (default: $STRATA_KEYS)", NULL},
    {"--insecure", NULL, "parameter_server: no CURVE encryption or authentication (trusted networks only)", NULL},
    {"--steps-per-execution", "N", "parameter_server: steps per closure (default 1)", NULL},
    {"--heartbeat-interval", "S", "parameter_server: worker heartbeat period; lost after 3 missed (default 1)", NULL},
    {"--coordinator-timeout", "S", "parameter_server: servers exit 3 when the chief is silent this long (default 60)", NULL},
    {"--ps-shards", "K", "parameter_server: split every variable along axis 0 into K shards on different ps (FixedShardsPartitioner)", NULL},
    {"--ps-min-shard-bytes", "N", "parameter_server: split variables into shards of at least N bytes, at most one per ps (MinSizePartitioner)", NULL},
    {"--max-staleness", "K", "parameter_server: gradients of variables more than K versions old are recomputed from fresh ones (default: unbounded)", NULL},
};
#define NTRAIN ((int)(sizeof train_opts / sizeof *train_opts))

typedef struct train_cfg {
  const char *model, *data, *save, *report, *devices, *cross_ops;
  const char *backup_dir, *ckpt_dir, *monitor, *csv, *log_dir, *plot;
  long backup_every, keep, patience, log_every;
  bool best_only;
  long epochs, batch, seed, threads, train_examples, replicas, bytes_per_pack;
  bool no_overlap;
  bool shard_optimizer;
  double lr, val_split, collective_timeout;
  long val_freq; /* --validation-freq */
  st_auto_shard auto_shard;
  st_optimizer_options opt;
  st_strategy_kind strategy;
  bool quiet;
  bool allow_nonfinite; /* --allow-nonfinite */
  bool resume_anyway;   /* --resume-anyway */
  long pipeline_stages, micro_batches;            /* --pipeline-stages, --micro-batches */
  const char *stage_boundaries;                   /* --stage-boundaries */
  st_pipeline_schedule pipeline_schedule;         /* --pipeline-schedule */
  const char *features, *test_data, *compression; /* --data tfrecord:... */
  bool skip_corrupt;
  long shuffle_buffer;  /* -1 = not given */
  long parallel_reads;  /* --num-parallel-reads: 0 = not given, -1 = auto */
  const char *cache;    /* --cache FILE */
  long logical_gpus;    /* --logical-gpus; 0 = not given */
  const char *load_weights; /* --load-weights FILE */
} train_cfg;

/* Outputs of the right type, none an input or another output, backup and
 * checkpoint directories apart (outputs.h); before anything is written. */
static bool check_paths(const train_cfg *c) {
  const cli_path files[] = {{"--save", c->save}, {"--report", c->report}, {"--csv", c->csv},
                            {"--plot", c->plot}};
  const cli_path dirs[] = {{"--backup-dir", c->backup_dir}, {"--checkpoint-dir", c->ckpt_dir},
                           {"--log-dir", c->log_dir}};
  const cli_path inputs[] = {{"--model", cli_is_json_model(c->model) ? c->model : NULL},
                             {"--load-weights", c->load_weights}};
  const char *data = strcmp(c->data, "fashion-mnist") ? c->data : CLI_FASHION_MNIST_DIR;
  return cli_check_outputs("train", files, 4, dirs, 3, inputs, 2, data);
}

/* Flags that only make sense together, and monitors that exist. */
static bool check_callback_flags(const train_cfg *c) {
  const char *cmd = "strata train";
  if ((c->backup_every || c->resume_anyway) && !c->backup_dir) {
    fprintf(stderr, "%s: --%s needs --backup-dir\n", cmd,
            c->backup_every ? "backup-every" : "resume-anyway");
    return false;
  }
  if ((c->best_only || cli_get(train_opts, NTRAIN, "--keep")) && !c->ckpt_dir) {
    fprintf(stderr, "%s: --keep and --save-best-only need --checkpoint-dir\n", cmd);
    return false;
  }
  if (cli_get(train_opts, NTRAIN, "--log-every") && !c->log_dir) {
    fprintf(stderr, "%s: --log-every needs --log-dir\n", cmd);
    return false;
  }
  const char *mon = c->monitor ? c->monitor : "val_loss";
  if (strcmp(mon, "loss") && strcmp(mon, "accuracy") && strcmp(mon, "val_loss") && strcmp(mon, "val_accuracy")) {
    fprintf(stderr, "%s: --monitor: unknown '%s' (loss, accuracy, val_loss, val_accuracy)\n", cmd, mon);
    return false;
  }
  if (!strncmp(mon, "val_", 4) && (c->best_only || c->patience >= 0) && !(c->val_split > 0)) {
    fprintf(stderr, "%s: --monitor %s needs --validation-split\n", cmd, mon);
    return false;
  }
  return true;
}

/* --pipeline-stages, --stage-boundaries, --micro-batches, --pipeline-schedule
 * (only with --strategy pipeline). */
static bool parse_pipeline(const cli_opt *o, train_cfg *c) {
  const char *cmd = "train", *v;
  bool any = false;
  if ((v = cli_get(o, NTRAIN, "--pipeline-stages")) &&
      !cli_int(cmd, "--pipeline-stages", v, 1, ST_MAX_REPLICAS, &c->pipeline_stages))
    return false;
  if ((v = cli_get(o, NTRAIN, "--micro-batches")) &&
      !cli_int(cmd, "--micro-batches", v, 1, 1 << 20, &c->micro_batches))
    return false;
  if ((v = cli_get(o, NTRAIN, "--pipeline-schedule")) &&
      st_pipeline_schedule_parse(v, &c->pipeline_schedule) != ST_OK) {
    fprintf(stderr, "strata train: --pipeline-schedule: %s\n", st_last_error());
    return false;
  }
  c->stage_boundaries = cli_get(o, NTRAIN, "--stage-boundaries");
  any = c->pipeline_stages || c->micro_batches || v || c->stage_boundaries;
  if (any && c->strategy != ST_STRATEGY_PIPELINE) {
    fprintf(stderr, "strata train: --pipeline-stages, --stage-boundaries, --micro-batches and "
            "--pipeline-schedule need --strategy pipeline\n");
    return false;
  }
  return true;
}

/* The parameter_server flags: numbers in range, only with that strategy, and
 * the callbacks it does not run yet refused. */
static bool check_ps_flags(const cli_opt *o, const train_cfg *c) {
  static const char *const ps_only[] = {"--cluster", "--task", "--keys", "--insecure",
                                        "--steps-per-execution", "--heartbeat-interval",
                                        "--coordinator-timeout", "--max-staleness", "--ps-shards",
                                        "--ps-min-shard-bytes"};
  static const char *const not_yet[] = {"--log-every", "--devices", "--replicas"};
  bool ps = c->strategy == ST_STRATEGY_PARAMETER_SERVER;
  for (size_t i = 0; i < sizeof ps_only / sizeof *ps_only; i++)
    if (!ps && cli_get(o, NTRAIN, ps_only[i])) {
      fprintf(stderr, "strata train: %s needs --strategy parameter_server\n", ps_only[i]);
      return false;
    }
  for (size_t i = 0; ps && i < sizeof not_yet / sizeof *not_yet; i++)
    if (cli_get(o, NTRAIN, not_yet[i])) {
      fprintf(stderr, "strata train: %s is not supported with --strategy parameter_server yet\n",
              not_yet[i]);
      return false;
    }
  const char *v;
  long n;
  double x;
  if ((v = cli_get(o, NTRAIN, "--steps-per-execution")) && !cli_int("train", "--steps-per-execution", v, 1, 100000, &n)) return false;
  if ((v = cli_get(o, NTRAIN, "--heartbeat-interval")) && !cli_float("train", "--heartbeat-interval", v, 0.01, 3600, &x)) return false;
  if ((v = cli_get(o, NTRAIN, "--coordinator-timeout")) && !cli_float("train", "--coordinator-timeout", v, 0.1, 1e6, &x)) return false;
  if ((v = cli_get(o, NTRAIN, "--max-staleness")) && !cli_int("train", "--max-staleness", v, 0, 1L << 40, &n)) return false;
  if ((v = cli_get(o, NTRAIN, "--ps-shards")) && !cli_int("train", "--ps-shards", v, 1, 1 << 20, &n)) return false;
  if ((v = cli_get(o, NTRAIN, "--ps-min-shard-bytes")) && !cli_int("train", "--ps-min-shard-bytes", v, 1, 1L << 40, &n)) return false;
  if (cli_get(o, NTRAIN, "--ps-shards") && cli_get(o, NTRAIN, "--ps-min-shard-bytes")) {
    fprintf(stderr, "strata train: --ps-shards and --ps-min-shard-bytes are two partitioners: give one\n");
    return false;
  }
  return true;
}

/* --features, --test-data, --compression, --skip-corrupt-records (tfrecord
 * data only) and --shuffle-buffer. */
static bool parse_tfrecord_flags(const cli_opt *o, train_cfg *c) {
  const char *v;
  c->features = cli_get(o, NTRAIN, "--features");
  c->test_data = cli_get(o, NTRAIN, "--test-data");
  c->compression = cli_get(o, NTRAIN, "--compression");
  c->skip_corrupt = cli_get(o, NTRAIN, "--skip-corrupt-records") != NULL;
  c->shuffle_buffer = -1;
  if ((v = cli_get(o, NTRAIN, "--shuffle-buffer")) &&
      !cli_int("train", "--shuffle-buffer", v, 0, 1L << 30, &c->shuffle_buffer))
    return false;
  c->cache = cli_get(o, NTRAIN, "--cache");
  if ((v = cli_get(o, NTRAIN, "--num-parallel-reads")) && strcmp(v, "auto") != 0 &&
      !cli_int("train", "--num-parallel-reads", v, 1, 256, &c->parallel_reads))
    return false;
  if (v && !strcmp(v, "auto")) c->parallel_reads = -1;
  bool tfr = cli_is_tfrecord(c->data);
  if (!tfr && (c->cache || c->parallel_reads)) {
    fprintf(stderr, "strata train: --cache and --num-parallel-reads need --data tfrecord:PATTERN\n");
    return false;
  }
  if (!tfr && (c->features || c->test_data || c->compression || c->skip_corrupt)) {
    fprintf(stderr, "strata train: --features, --test-data, --compression and "
            "--skip-corrupt-records need --data tfrecord:PATTERN\n");
    return false;
  }
  st_compression comp;
  if (c->compression && st_compression_parse(c->compression, &comp) != ST_OK) {
    fprintf(stderr, "strata train: --compression: %s\n", st_last_error());
    return false;
  }
  if (tfr && c->val_split > 0) {
    fprintf(stderr, "strata train: --validation-split needs in-memory data (IDX); with --data "
            "tfrecord:... write a separate validation set\n");
    return false;
  }
  if (!tfr && c->auto_shard == ST_AUTO_SHARD_FILE) {
    fprintf(stderr, "strata train: --auto-shard file needs a file dataset (--data "
            "tfrecord:PATTERN); IDX data is in memory (use data or off)\n");
    return false;
  }
  if (tfr && !c->features) {
    fprintf(stderr, "strata train: --data tfrecord:PATTERN needs --features SPEC.json\n");
    return false;
  }
  return !c->features || cli_check_readable("train", "--features", c->features);
}

/* --strategy parameter_server: this process is the chief (tools/ps_coord.c);
 * cb[n]: the epoch-level callbacks the flags ask for. */
static int run_ps(const train_cfg *c, const st_callback *cb, int n) {
  ps_train_args a;
  memset(&a, 0, sizeof a);
  a.model = c->model, a.data = c->data, a.save = c->save, a.report = c->report;
  a.epochs = c->epochs, a.batch = c->batch, a.seed = c->seed, a.train_examples = c->train_examples;
  a.val_split = c->val_split, a.lr = c->lr, a.opt = c->opt, a.quiet = c->quiet;
  const char *v;
  a.cluster_file = cli_get(train_opts, NTRAIN, "--cluster");
  a.task = cli_get(train_opts, NTRAIN, "--task");
  a.keys = cli_get(train_opts, NTRAIN, "--keys");
  if (!a.keys) a.keys = getenv("STRATA_KEYS");
  a.insecure = cli_get(train_opts, NTRAIN, "--insecure") != NULL;
  a.steps_per_execution = (v = cli_get(train_opts, NTRAIN, "--steps-per-execution")) ? atol(v) : 1;
  a.heartbeat_interval = (v = cli_get(train_opts, NTRAIN, "--heartbeat-interval")) ? atof(v) : 1.0;
  a.coordinator_timeout = (v = cli_get(train_opts, NTRAIN, "--coordinator-timeout")) ? atof(v) : 60.0;
  a.max_staleness = (v = cli_get(train_opts, NTRAIN, "--max-staleness")) ? atol(v) : -1;
  a.ps_shards = (v = cli_get(train_opts, NTRAIN, "--ps-shards")) ? atol(v) : 0;
  a.ps_min_shard_bytes = (v = cli_get(train_opts, NTRAIN, "--ps-min-shard-bytes")) ? atol(v) : 0;
  a.backup_dir = c->backup_dir, a.backup_every = c->backup_every, a.resume_anyway = c->resume_anyway;
  a.callbacks = cb, a.ncallbacks = n, a.plot = c->plot;
  return ps_train(&a);
}

static bool parse_train(const cli_opt *o, train_cfg *c) {
  const char *cmd = "train", *v;
  memset(c, 0, sizeof *c);
  c->model = cli_get(o, NTRAIN, "--model") ? cli_get(o, NTRAIN, "--model") : "cnn";
  c->data = cli_get(o, NTRAIN, "--data") ? cli_get(o, NTRAIN, "--data") : "fashion-mnist";
  c->save = cli_get(o, NTRAIN, "--save");
  c->report = cli_get(o, NTRAIN, "--report");
  c->quiet = cli_get(o, NTRAIN, "--quiet") != NULL;
  c->allow_nonfinite = cli_get(o, NTRAIN, "--allow-nonfinite") != NULL;
  c->resume_anyway = cli_get(o, NTRAIN, "--resume-anyway") != NULL;
  c->epochs = 1;
  c->val_freq = 1;
  c->batch = 32;
  st_optimizer_kind ok = ST_OPT_ADAM;
  if ((v = cli_get(o, NTRAIN, "--epochs")) && !cli_int(cmd, "--epochs", v, 1, 100000, &c->epochs)) return false;
  if ((v = cli_get(o, NTRAIN, "--batch-size")) && !cli_int(cmd, "--batch-size", v, 1, 1 << 20, &c->batch)) return false;
  if ((v = cli_get(o, NTRAIN, "--seed")) && !cli_int(cmd, "--seed", v, 0, 0x7fffffffL, &c->seed)) return false;
  if ((v = cli_get(o, NTRAIN, "--threads")) && !cli_int(cmd, "--threads", v, 1, 1024, &c->threads)) return false;
  if ((v = cli_get(o, NTRAIN, "--replicas")) && !cli_int(cmd, "--replicas", v, 1, ST_MAX_REPLICAS, &c->replicas)) return false;
  c->devices = cli_get(o, NTRAIN, "--devices");
  if ((v = cli_get(o, NTRAIN, "--logical-gpus")) && !cli_int(cmd, "--logical-gpus", v, 1, ST_MAX_REPLICAS, &c->logical_gpus)) return false;
  c->cross_ops = cli_get(o, NTRAIN, "--cross-device-ops");
  c->bytes_per_pack = -1;
  if ((v = cli_get(o, NTRAIN, "--bytes-per-pack")) &&
      !cli_int(cmd, "--bytes-per-pack", v, 0, 1L << 40, &c->bytes_per_pack))
    return false;
  c->no_overlap = cli_get(o, NTRAIN, "--no-overlap") != NULL;
  c->shard_optimizer = cli_get(o, NTRAIN, "--shard-optimizer") != NULL;
  c->backup_dir = cli_get(o, NTRAIN, "--backup-dir");
  c->ckpt_dir = cli_get(o, NTRAIN, "--checkpoint-dir");
  c->monitor = cli_get(o, NTRAIN, "--monitor");
  c->csv = cli_get(o, NTRAIN, "--csv");
  c->log_dir = cli_get(o, NTRAIN, "--log-dir");
  c->plot = cli_get(o, NTRAIN, "--plot");
  c->best_only = cli_get(o, NTRAIN, "--save-best-only") != NULL;
  c->keep = 3;
  c->patience = -1;
  if ((v = cli_get(o, NTRAIN, "--backup-every")) && !cli_int(cmd, "--backup-every", v, 1, 1L << 40, &c->backup_every)) return false;
  if ((v = cli_get(o, NTRAIN, "--keep")) && !cli_int(cmd, "--keep", v, 0, 1000000, &c->keep)) return false;
  if ((v = cli_get(o, NTRAIN, "--early-stopping")) && !cli_int(cmd, "--early-stopping", v, 0, 1000000, &c->patience)) return false;
  if ((v = cli_get(o, NTRAIN, "--log-every")) && !cli_int(cmd, "--log-every", v, 0, INT_MAX, &c->log_every)) return false;
  if ((v = cli_get(o, NTRAIN, "--train-examples")) && !cli_int(cmd, "--train-examples", v, 1, 1L << 40, &c->train_examples)) return false;
  if ((v = cli_get(o, NTRAIN, "--validation-split")) && !cli_float(cmd, "--validation-split", v, 0.0, 0.99, &c->val_split)) return false;
  if ((v = cli_get(o, NTRAIN, "--validation-freq")) && !cli_int(cmd, "--validation-freq", v, 1, 100000, &c->val_freq)) return false;
  if ((v = cli_get(o, NTRAIN, "--optimizer")) && st_optimizer_parse(v, &ok) != ST_OK) {
    fprintf(stderr, "strata train: --optimizer: %s\n", st_last_error());
    return false;
  }
  c->opt = st_optimizer_default_options(ok);
  if ((v = cli_get(o, NTRAIN, "--lr"))) {
    if (!cli_float(cmd, "--lr", v, 1e-12, 1e6, &c->lr)) return false;
    c->opt.lr = st_schedule_constant((float)c->lr);
  }
  c->lr = c->opt.lr.initial;
  c->strategy = ST_STRATEGY_ONE_DEVICE;
  if ((v = cli_get(o, NTRAIN, "--strategy")) && st_strategy_kind_parse(v, &c->strategy) != ST_OK) {
    fprintf(stderr, "strata train: --strategy: %s\n", st_last_error());
    return false;
  }
  bool mwms = c->strategy == ST_STRATEGY_MULTI_WORKER_MIRRORED;
  if (!parse_pipeline(o, c)) return false;
  bool multi = c->strategy == ST_STRATEGY_MIRRORED || c->strategy == ST_STRATEGY_CENTRAL_STORAGE || mwms;
  bool mirrored = c->strategy == ST_STRATEGY_MIRRORED || mwms;
  if (!multi && (c->replicas || c->cross_ops || (c->devices && c->strategy != ST_STRATEGY_PIPELINE))) {
    fprintf(stderr, "strata train: --devices, --replicas and --cross-device-ops need "
            "--strategy mirrored, central_storage or multi_worker_mirrored\n");
    return false;
  }
  if (!mirrored && (c->bytes_per_pack >= 0 || c->no_overlap)) {
    fprintf(stderr, "strata train: --bytes-per-pack and --no-overlap need --strategy mirrored "
            "or multi_worker_mirrored\n");
    return false;
  }
  if (!mirrored && c->shard_optimizer) {
    fprintf(stderr, "strata train: --shard-optimizer needs --strategy mirrored or "
            "multi_worker_mirrored\n");
    return false;
  }
  c->auto_shard = ST_AUTO_SHARD_AUTO;
  if ((v = cli_get(o, NTRAIN, "--auto-shard")) && st_auto_shard_parse(v, &c->auto_shard) != ST_OK) {
    fprintf(stderr, "strata train: --auto-shard: %s\n", st_last_error());
    return false;
  }
  if ((v = cli_get(o, NTRAIN, "--collective-timeout")) &&
      !cli_float(cmd, "--collective-timeout", v, 0.001, 1e7, &c->collective_timeout))
    return false;
  bool pipe = c->strategy == ST_STRATEGY_PIPELINE; /* under mpirun: --collective-timeout */
  if ((!mwms && cli_get(o, NTRAIN, "--auto-shard")) ||
      (!mwms && !pipe && cli_get(o, NTRAIN, "--collective-timeout"))) {
    fprintf(stderr, "strata train: --auto-shard and --collective-timeout need --strategy "
            "multi_worker_mirrored\n");
    return false;
  }
  if (c->threads && c->strategy != ST_STRATEGY_ONE_DEVICE) {
    fprintf(stderr, "strata train: --threads is for --strategy one_device (use --replicas)\n");
    return false;
  }
  if (!check_ps_flags(o, c)) return false;
  if (!check_callback_flags(c)) return false;
  if (!parse_tfrecord_flags(o, c)) return false;
  if ((c->load_weights = cli_get(o, NTRAIN, "--load-weights")) &&
      (c->strategy == ST_STRATEGY_PARAMETER_SERVER || !cli_check_readable(cmd, "--load-weights", c->load_weights))) {
    if (c->strategy == ST_STRATEGY_PARAMETER_SERVER)
      fprintf(stderr, "strata train: --load-weights is not supported with --strategy parameter_server\n");
    return false;
  }
  bool json = cli_is_json_model(c->model), known = json;
  for (const char *const *n = st_builtin_model_names(); *n; n++) known |= !strcmp(*n, c->model);
  if (known)
    return (!json || cli_check_readable(cmd, "--model", c->model)) &&
           cli_check_writable(cmd, "--save", c->save) &&
           cli_check_writable(cmd, "--report", c->report) &&
           cli_check_writable(cmd, "--csv", c->csv) && cli_check_writable(cmd, "--plot", c->plot) &&
           cli_check_writable(cmd, "--backup-dir", c->backup_dir) &&
           cli_check_writable(cmd, "--checkpoint-dir", c->ckpt_dir) &&
           cli_check_writable(cmd, "--log-dir", c->log_dir) && check_paths(c);
  fprintf(stderr, "strata train: --model: unknown model '%s' (built-in models: mlp, cnn; or a "
          "Keras FILE.json)\n", c->model);
  return false;
}

/* SIGTERM (a scheduler preempting the job) or SIGINT (Ctrl-C): fit stops at
 * the next step boundary after writing --backup-dir's checkpoint, exit 5; a
 * second signal ends the process as usual (SA_RESETHAND). */
static void on_stop_signal(int sig) {
  (void)sig;
  st_request_stop();
}

static void catch_stop_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

/* A built-in model by name, or a Keras model.to_json() FILE.json (its own
 * name kept). */
static st_status create_model(const char *name, st_model_options mo, st_model **model) {
  if (!cli_is_json_model(name)) return st_builtin_model_create(name, &mo, model);
  mo.name = NULL;
  return st_model_from_keras_json(name, &mo, model);
}

/* Model + strategy bound together and compiled. */
static st_status build_model(const char *name, const st_strategy_options *so, uint64_t seed,
                             const st_optimizer_options *opt, st_strategy **strategy,
                             st_model **model) {
  st_status s = st_strategy_create(so, strategy);
  if (s != ST_OK) return s;
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  mo.seed = seed;
  mo.strategy = *strategy;
  if ((s = create_model(name, mo, model)) != ST_OK) return s;
  st_compile_options co = st_compile_default_options();
  /* a model that ends in softmax outputs probabilities; the built-in ones
   * (and any other) end in a linear Dense: logits */
  int nl = st_model_layer_count(*model);
  bool softmax =
      nl && st_layer_output_activation(st_model_layer(*model, nl - 1)) == ST_ACT_SOFTMAX;
  co.loss = softmax ? ST_LOSS_SPARSE_CE : ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = *opt;
  return st_model_compile(*model, &co);
}

/* The callbacks the flags ask for (each owns its state) and the event writer
 * the TensorBoard one borrows. */
typedef struct callbacks {
  st_callback cb[8];
  int n;
  st_tensorboard *tb;
} callbacks;

static void free_callbacks(callbacks *k) {
  for (int i = 0; i < k->n; i++) st_callback_destroy(&k->cb[i]);
  st_tensorboard_destroy(k->tb); /* after the callback that borrows it */
}

/* A pipeline across processes keeps each stage's variables in its own
 * process: every process takes part in a save (the chief writes). */
static bool saves_everywhere(const st_strategy *s) {
  return st_strategy_pipeline_stages(s) > 0 && st_strategy_worker_count(s) > 1;
}

/* Multi-worker: only the chief (rank 0) writes logs and checkpoints and shows
 * progress; EarlyStopping runs everywhere (the figures are global, so every
 * worker stops at the same epoch). ckpt_all: ModelCheckpoint everywhere too
 * (a pipeline's stages send their tensors; the chief writes). */
static st_status make_callbacks(const train_cfg *c, bool chief, bool ckpt_all, callbacks *k) {
  memset(k, 0, sizeof *k);
  const char *mon = c->monitor ? c->monitor : "val_loss";
  st_status s = ST_OK;
  if (c->log_dir && chief) {
    if ((s = st_tensorboard_create(c->log_dir, &k->tb)) != ST_OK) goto fail;
    if ((s = st_tensorboard_callback_create(k->tb, (int)c->log_every, &k->cb[k->n])) != ST_OK)
      goto fail;
    k->n++;
  }
  if (c->csv && chief) {
    if ((s = st_csv_logger_create(c->csv, &k->cb[k->n])) != ST_OK) goto fail;
    k->n++;
  }
  if (c->ckpt_dir && (chief || ckpt_all)) {
    s = st_model_checkpoint_create(c->ckpt_dir, mon, c->best_only, (int)c->keep, &k->cb[k->n]);
    if (s != ST_OK) goto fail;
    k->n++;
  }
  if (c->patience >= 0) {
    st_early_stopping_options eo = st_early_stopping_default_options();
    eo.monitor = mon;
    eo.patience = (int)c->patience;
    if ((s = st_early_stopping_create(eo, &k->cb[k->n])) != ST_OK) goto fail;
    k->n++;
  }
  if (!c->quiet && chief) { /* last: the progress line comes after the other epoch-end work */
    if ((s = st_progress_create(stderr, isatty(2), (int)c->epochs, &k->cb[k->n])) != ST_OK)
      goto fail;
    k->n++;
  }
  return ST_OK;
fail:
  free_callbacks(k);
  return s;
}

/* The run's locks on --backup-dir and --checkpoint-dir (held until it ends,
 * so a second run sharing one fails at once, exit 2 "DIR is in use by pid
 * N"); the chief's only: the other workers do not write there. */
typedef struct dir_locks {
  st__dir_lock backup, ckpt;
} dir_locks;

static st_status lock_dirs(const train_cfg *c, dir_locks *l) {
  l->backup.fd = l->ckpt.fd = -1;
  st_status s = c->backup_dir ? st__dir_lock_acquire(&l->backup, c->backup_dir) : ST_OK;
  if (s == ST_OK && c->ckpt_dir) s = st__dir_lock_acquire(&l->ckpt, c->ckpt_dir);
  return s;
}

static void unlock_dirs(const train_cfg *c, dir_locks *l) {
  st__dir_lock_release(&l->ckpt, c->ckpt_dir);
  st__dir_lock_release(&l->backup, c->backup_dir);
}

/* parameter_server: the chief takes the locks and builds the callbacks as
 * below, then runs the job (run_ps). */
static int run_ps_chief(const train_cfg *c) {
  dir_locks locks = {{-1, 0}, {-1, 0}};
  callbacks cbs = {0};
  train_cfg no_progress = *c; /* the chief prints its own epoch lines */
  no_progress.quiet = true;
  st_status s = lock_dirs(c, &locks);
  if (s == ST_OK) s = make_callbacks(&no_progress, true, false, &cbs);
  int rc = s == ST_OK ? run_ps(c, cbs.cb, cbs.n) : s == ST_ERR_IO ? EXIT_WRITE : cli_fail("train", s);
  if (s == ST_ERR_IO) fprintf(stderr, "strata train: %s\n", st_last_error());
  free_callbacks(&cbs);
  unlock_dirs(c, &locks);
  return rc;
}

/* After a successful run: temp files of its outputs left by earlier runs
 * killed while writing them (base/fileio.h says which ones qualify). */
static void clean_stale(const train_cfg *c, time_t start) {
  const char *outs[] = {c->save, c->report, c->csv, c->plot};
  for (int i = 0; i < 4; i++)
    if (outs[i]) st__clean_stale_temps(outs[i], start);
}

/* --data tfrecord:PATTERN: the pipelines, once the strategy says which
 * worker this is (auto-shard file reads this worker's files). */
static int load_tfrecord(const train_cfg *c, const st_strategy_options *so,
                         const st_strategy *strategy, cli_tfrecord_args *a, cli_data *d) {
  a->pattern = c->data + 9;
  a->features = c->features;
  a->test_data = c->test_data;
  a->compression = c->compression;
  a->skip_corrupt = c->skip_corrupt;
  a->shuffle_buffer = c->shuffle_buffer >= 0 ? c->shuffle_buffer : 10000;
  a->train_examples = c->train_examples;
  a->parallel_reads = (int)c->parallel_reads;
  a->cache = c->cache;
  a->batch = (int)c->batch;
  a->seed = (uint64_t)c->seed;
  bool mwms = c->strategy == ST_STRATEGY_MULTI_WORKER_MIRRORED;
  a->shard = mwms ? so->auto_shard : ST_AUTO_SHARD_OFF;
  a->worker = st_strategy_worker_rank(strategy);
  a->workers = st_strategy_worker_count(strategy);
  if (a->workers < 1) a->workers = 1, a->worker = 0;
  return cli_load_tfrecord("train", a, d);
}

static int run_train(const train_cfg *c) {
  if (c->strategy == ST_STRATEGY_PARAMETER_SERVER) return run_ps_chief(c);
  double t0 = st_now_seconds();
  catch_stop_signals(); /* a signal while loading stops fit before its first step */
  cli_data d;
  bool tfr = cli_is_tfrecord(c->data);
  cli_tfrecord_tally tally = {0, 0};
  cli_tfrecord_args ta = {.tally = &tally};
  memset(&d, 0, sizeof d);
  int rc = tfr ? EXIT_OK : cli_load_data("train", c->data, c->val_split, c->train_examples, (int)c->batch,
                         (uint64_t)c->seed, c->allow_nonfinite, &d);
  if (!rc && !tfr && c->shuffle_buffer >= 0)
    rc = cli_set_shuffle_buffer("train", &d, c->shuffle_buffer ? c->shuffle_buffer : -1);
  if (rc) {
    cli_free_data(&d);
    return rc;
  }
  st_strategy *strategy = NULL;
  st_model *model = NULL;
  st_history h = {0};
  st_eval_result test = {0};
  dir_locks locks = {{-1, 0}, {-1, 0}};
  bool chief = false;
  time_t started = time(NULL);
  st_strategy_options so = st_strategy_default_options(c->strategy);
  so.threads = (int)c->threads;
  so.devices = c->devices;
  so.logical_gpus = (int)c->logical_gpus;
  so.replicas = (int)c->replicas;
  so.cross_device_ops = c->cross_ops;
  if (c->bytes_per_pack >= 0) so.bytes_per_pack = (size_t)c->bytes_per_pack;
  so.no_overlap = c->no_overlap;
  so.shard_optimizer = c->shard_optimizer;
  so.auto_shard = c->auto_shard;
  so.collective_timeout = c->collective_timeout;
  so.pipeline_stages = (int)c->pipeline_stages;
  so.stage_boundaries = c->stage_boundaries;
  so.micro_batches = (int)c->micro_batches;
  so.pipeline_schedule = c->pipeline_schedule;
  if (tfr && so.auto_shard == ST_AUTO_SHARD_AUTO) so.auto_shard = ST_AUTO_SHARD_FILE;
  st_status s = build_model(c->model, &so, (uint64_t)c->seed, &c->opt, &strategy, &model);
  if (s != ST_OK) goto fail;
  if (c->load_weights && (s = st_model_load_weights(model, c->load_weights)) != ST_OK) goto fail;
  if (tfr && (rc = load_tfrecord(c, &so, strategy, &ta, &d)) != EXIT_OK) goto done;
  if ((rc = cli_match_model_input("train", &d, st_model_input_shape(model))) != EXIT_OK)
    goto done;
  chief = st_strategy_is_chief(strategy);
  if (chief && (s = lock_dirs(c, &locks)) != ST_OK) {
    rc = s == ST_ERR_IO ? EXIT_WRITE : cli_fail("train", s);
    if (s == ST_ERR_IO) fprintf(stderr, "strata train: %s\n", st_last_error());
    goto done;
  }
  callbacks cbs;
  if ((s = make_callbacks(c, chief, saves_everywhere(strategy), &cbs)) != ST_OK) goto fail;
  st_fit_options fo = st_fit_default_options();
  fo.epochs = (int)c->epochs;
  fo.validation = d.val;
  fo.callbacks = cbs.cb;
  fo.ncallbacks = cbs.n;
  fo.backup_dir = c->backup_dir;
  fo.backup_every_steps = c->backup_every;
  fo.data_fingerprint = d.fingerprint;
  fo.resume_anyway = c->resume_anyway;
  fo.validation_freq = (int)c->val_freq;
  s = st_model_fit(model, d.train, &fo, &h);
  free_callbacks(&cbs);
  if (tfr && !c->quiet) cli_tfrecord_report("train", &ta, &d);
  if (s != ST_OK) {
    rc = s == ST_ERR_IO ? EXIT_WRITE : cli_fail("train", s);
    if (s == ST_ERR_IO) fprintf(stderr, "strata train: %s\n", st_last_error());
    goto done;
  }
  char title[PATH_MAX + 64]; /* the whole --model path (512 bytes cut it mid-UTF-8) */
  snprintf(title, sizeof title, "%s \u2014 %s", c->model, st_strategy_kind_name(c->strategy));
  if ((s = st_model_evaluate(model, d.test, &test)) != ST_OK) goto fail;
  if (!chief && c->save && saves_everywhere(strategy) &&
      (s = st_model_save_weights(model, c->save)) != ST_OK) /* sends its stage to the chief */
    goto fail;
  if (!chief) goto done; /* the chief reports and writes */
  if (c->plot && (s = st_plot_history_svg(&h, title, c->plot)) != ST_OK) {
    fprintf(stderr, "strata train: --plot: %s\n", st_last_error());
    rc = EXIT_WRITE;
    goto done;
  }
  printf("test_loss: %.4f - test_accuracy: %.4f - samples/s: %.0f\n", test.loss, test.accuracy,
         h.samples_per_sec);
  if (c->save && (s = st_model_save_weights(model, c->save)) != ST_OK) {
    fprintf(stderr, "strata train: --save: %s\n", st_last_error());
    rc = EXIT_WRITE;
    goto done;
  }
  report_info ri = {c->model, st_strategy_kind_name(c->strategy), st_optimizer_name(c->opt.kind),
                    st_strategy_num_replicas_in_sync(strategy), (int)c->batch, (uint64_t)c->seed,
                    c->lr, d.n_train, d.n_val, &h, test, st_now_seconds() - t0, strategy};
  if (c->report && report_write(c->report, &ri) != 0) {
    fprintf(stderr, "strata train: --report %s: could not write the file\n", c->report);
    rc = EXIT_WRITE;
  }
  goto done;
fail:
  rc = cli_fail("train", s);
done:
  if (rc == EXIT_OK && chief) clean_stale(c, started);
  unlock_dirs(c, &locks);
  st_history_destroy(&h);
  st_model_destroy(model);
  st_strategy_destroy(strategy);
  cli_free_data(&d);
  return rc;
}

int cmd_train(int argc, char **argv) {
  int rc = cli_parse("train", TRAIN_USAGE, argc, argv, train_opts, NTRAIN);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  train_cfg c;
  if (!parse_train(train_opts, &c)) return EXIT_USAGE;
  return run_train(&c);
}

/* ---- evaluate ---- */
static cli_opt eval_opts[] = {
    {"--model", "NAME", "built-in model the weights belong to: mlp or cnn (required)", NULL},
    {"--weights", "FILE", "safetensors file written by 'strata train --save' (required)", NULL},
    {"--data", "SRC", "fashion-mnist (default) or a DIR of MNIST-style IDX files", NULL},
    {"--batch-size", "B", "evaluation batch size (default 256)", NULL},
};
#define NEVAL ((int)(sizeof eval_opts / sizeof *eval_opts))

int cmd_evaluate(int argc, char **argv) {
  int rc = cli_parse("evaluate", "--model NAME --weights FILE [--data SRC]", argc, argv,
                     eval_opts, NEVAL);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  const char *name = cli_get(eval_opts, NEVAL, "--model");
  const char *weights = cli_get(eval_opts, NEVAL, "--weights");
  const char *data = cli_get(eval_opts, NEVAL, "--data");
  const char *bv = cli_get(eval_opts, NEVAL, "--batch-size");
  long batch = 256;
  if (!name || !weights) {
    fprintf(stderr, "strata evaluate: --model and --weights are required (see 'strata evaluate --help')\n");
    return EXIT_USAGE;
  }
  if (bv && !cli_int("evaluate", "--batch-size", bv, 1, 1 << 20, &batch)) return EXIT_USAGE;
  if ((cli_is_json_model(name) && !cli_check_readable("evaluate", "--model", name)) ||
      !cli_check_readable("evaluate", "--weights", weights))
    return EXIT_USAGE;
  cli_data d;
  if ((rc = cli_load_data("evaluate", data ? data : "fashion-mnist", 0, 0, (int)batch, 0, false, &d)))
    return rc;
  st_strategy *strategy = NULL;
  st_model *model = NULL;
  st_eval_result r;
  st_optimizer_options opt = st_optimizer_default_options(ST_OPT_ADAM);
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  st_status s = build_model(name, &so, 0, &opt, &strategy, &model);
  if (s == ST_OK && (rc = cli_match_model_input("evaluate", &d, st_model_input_shape(model)))) {
    st_model_destroy(model);
    st_strategy_destroy(strategy);
    cli_free_data(&d);
    return rc;
  }
  if (s == ST_OK) s = st_model_load_weights(model, weights);
  if (s == ST_OK) s = st_model_evaluate(model, d.test, &r);
  if (s == ST_OK)
    printf("test_loss: %.4f - test_accuracy: %.4f - examples: %lld\n", r.loss, r.accuracy,
           (long long)r.examples);
  rc = s == ST_OK ? EXIT_OK : cli_fail("evaluate", s);
  st_model_destroy(model);
  st_strategy_destroy(strategy);
  cli_free_data(&d);
  return rc;
}

/* ---- summary ---- */
static cli_opt summary_opts[] = {
    {"--model", "NAME", "built-in model mlp or cnn (default cnn), or a Keras FILE.json", NULL},
};

int cmd_summary(int argc, char **argv) {
  int rc = cli_parse("summary", "[--model mlp|cnn]", argc, argv, summary_opts, 1);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  const char *name = summary_opts[0].value ? summary_opts[0].value : "cnn";
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  st_model *m = NULL;
  if (cli_is_json_model(name) && !cli_check_readable("summary", "--model", name))
    return EXIT_USAGE;
  st_status s = create_model(name, mo, &m);
  if (s != ST_OK) return cli_fail("summary", s);
  char *text = NULL;
  s = st_model_summary(m, &text);
  if (s == ST_OK) fputs(text, stdout);
  rc = s == ST_OK ? EXIT_OK : cli_fail("summary", s);
  free(text);
  st_model_destroy(m);
  return rc;
}
