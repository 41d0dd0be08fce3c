/* strata train / evaluate (summary: cmd_summary.c). */
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

/* What `strata train` was given: train_opts (below) stores each option into
 * its field; train_defaults sets the rest. */
typedef struct train_cfg {
  const char *model, *data, *save, *report, *devices, *cross_ops, *precision;
  const char *backup_dir, *ckpt_dir, *monitor, *csv, *log_dir, *plot;
  long backup_every, keep, patience, log_every;
  bool best_only;
  long epochs, batch, seed, threads, train_examples, replicas, bytes_per_pack;
  bool no_overlap;
  bool shard_optimizer;
  bool sync_bn;         /* --sync-batchnorm */
  double lr, val_split, collective_timeout;
  long val_freq; /* --validation-freq */
  st_auto_shard auto_shard;
  st_optimizer_kind opt_kind; /* --optimizer */
  st_optimizer_options opt;   /* its Keras defaults, --lr */
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
  /* parameter_server (tools/ps.h: ps_train_args) */
  const char *cluster, *task, *keys;
  bool insecure;
  long steps_per_execution, max_staleness, ps_shards, ps_min_shard_bytes;
  double heartbeat_interval, coordinator_timeout;
} train_cfg;

/* CLI_FN stores: the library's name parsers, and "auto" or a count. */
static bool store_optimizer(const char *cmd, const char *name, const char *v, void *f) {
  return cli_lib_ok(cmd, name, st_optimizer_parse(v, f));
}
static bool store_strategy(const char *cmd, const char *name, const char *v, void *f) {
  return cli_lib_ok(cmd, name, st_strategy_kind_parse(v, f));
}
static bool store_auto_shard(const char *cmd, const char *name, const char *v, void *f) {
  return cli_lib_ok(cmd, name, st_auto_shard_parse(v, f));
}
static bool store_schedule(const char *cmd, const char *name, const char *v, void *f) {
  return cli_lib_ok(cmd, name, st_pipeline_schedule_parse(v, f));
}
static bool store_parallel_reads(const char *cmd, const char *name, const char *v, void *f) {
  if (strcmp(v, "auto") != 0) return cli_int(cmd, name, v, 1, 256, f);
  *(long *)f = -1;
  return true;
}

#define STR(n, m, f, h) CLI_OPT_STR(n, m, train_cfg, f, h)
#define FLAG(n, f, h) CLI_OPT_FLAG(n, train_cfg, f, h)
#define INT(n, m, f, lo, hi, h) CLI_OPT_INT(n, m, train_cfg, f, lo, hi, h)
#define FLOAT(n, m, f, lo, hi, h) CLI_OPT_FLOAT(n, m, train_cfg, f, lo, hi, h)
#define FN(n, m, f, fn, h) CLI_OPT_FN(n, m, train_cfg, f, fn, h)
static cli_opt train_opts[] = {
    STR("--model", "NAME", model, "built-in model mlp, cnn (default), resnet20 or mobilenet-tiny, gpt (GPT-2: its options in 'strata train --model gpt --help'), or a Keras model.to_json() FILE.json"),
    STR("--data", "SRC", data, "fashion-mnist (the Debian dataset, default), a DIR of MNIST-style IDX files, or tfrecord:PATTERN (TFRecord files, streamed; needs --features)"),
    INT("--epochs", "N", epochs, 1, 100000, "passes over the training data (default 1)"),
    INT("--batch-size", "B", batch, 1, 1 << 20, "global batch size (default 32, as Keras)"),
    FN("--optimizer", "NAME", opt_kind, store_optimizer, "adam (default), sgd, rmsprop or adamw, with Keras defaults"),
    FLOAT("--lr", "X", lr, 1e-12, 1e6, "learning rate (default: the optimizer's Keras default)"),
    INT("--seed", "S", seed, 0, 0x7fffffffL, "seed for weights, shuffling and dropout (default 0)"),
    FLOAT("--validation-split", "F", val_split, 0.0, 0.99, "fraction of the training data held out for validation (default 0)"),
    INT("--validation-freq", "N", val_freq, 1, 100000, "validate after every Nth epoch only (Keras's validation_freq; default 1)"),
    INT("--train-examples", "N", train_examples, 1, 1L << 40, "use only the first N training examples (default all)"),
    FN("--strategy", "NAME", strategy, store_strategy, "one_device (default), mirrored, central_storage, multi_worker_mirrored (under mpirun) or pipeline (model parallel)"),
    STR("--precision", "P", precision, "GPU matrix products: fp32 (default: as the CPU) or tf32 (tensor cores); bf16 is not built yet"),
    STR("--devices", "LIST", devices, "mirrored/central_storage/multi_worker_mirrored: (local) devices, e.g. cpu:0,cpu:1 or gpu:0,gpu:1 (one replica each); one_device: its device (gpu:0); pipeline: one stage each"),
    INT("--replicas", "N", replicas, 1, ST_MAX_REPLICAS, "the same as a replica count (default: one per core; multi_worker_mirrored: 1 per worker)"),
    INT("--logical-gpus", "N", logical_gpus, 1, ST_MAX_REPLICAS, "split each GPU into N logical GPUs (TensorFlow's logical devices); --devices gpu:0..gpu:(GPUs*N-1) name them"),
    STR("--cross-device-ops", "OPS", cross_ops, "mirrored: all_reduce (default) or reduction_to_one_device"),
    INT("--bytes-per-pack", "N", bytes_per_pack, 0, 1L << 40, "mirrored: gradient pack size in bytes (default 4194304; 0 = one pack)"),
    FLAG("--no-overlap", no_overlap, "mirrored: all-reduce the packs after backward instead of during it"),
    FLAG("--shard-optimizer", shard_optimizer, "mirrored/multi_worker_mirrored: each replica keeps the optimizer slots of its shard of the weights only (ZeRO stage 1; same weights)"),
    FLAG("--sync-batchnorm", sync_bn, "BatchNormalization(synchronized=True) in the built-in models: batch statistics over all replicas and workers (one_device, mirrored, central_storage, multi_worker_mirrored; default: per replica, as Keras)"),
    FLOAT("--collective-timeout", "S", collective_timeout, 0.001, 1e7, "multi_worker_mirrored, pipeline under mpirun: fail (exit 3) when a peer has not joined a collective within S seconds (default 300)"),
    FN("--auto-shard", "POLICY", auto_shard, store_auto_shard, "multi_worker_mirrored: data (default for IDX: each worker takes its contiguous share of every global batch), off (each worker trains on its own batches) or file (tfrecord data, its default: each worker reads its own files)"),
    INT("--threads", "N", threads, 1, 1024, "one_device: compute threads (default: all cores)"),
    INT("--pipeline-stages", "S", pipeline_stages, 1, ST_MAX_REPLICAS, "pipeline: stages on the CPU (default: one per --devices entry, else 2)"),
    STR("--stage-boundaries", "LIST", stage_boundaries, "pipeline: layer indices where stages 1.. start, e.g. 3,5 (default: balanced by FLOPs + parameter bytes)"),
    INT("--micro-batches", "M", micro_batches, 1, 1 << 20, "pipeline: micro-batches per global batch (default: one per stage)"),
    FN("--pipeline-schedule", "NAME", pipeline_schedule, store_schedule, "pipeline: gpipe (default: all forwards, then all backwards) or 1f1b"),
    STR("--save", "FILE", save, "write the trained weights as safetensors"),
    STR("--load-weights", "FILE", load_weights, "start from the weights in FILE (safetensors, as --save writes) instead of initialising them"),
    STR("--report", "FILE", report, "write a JSON report of the run"),
    STR("--backup-dir", "DIR", backup_dir, "BackupAndRestore: resume an interrupted run from DIR; deleted when done"),
    INT("--backup-every", "N", backup_every, 1, 1L << 40, "with --backup-dir: also back up every N steps (default: each epoch)"),
    FLAG("--resume-anyway", resume_anyway, "with --backup-dir: resume a backup written by a run with another model, optimizer, --lr, --seed, --batch-size or data (default: exit 2 naming the difference)"),
    STR("--checkpoint-dir", "DIR", ckpt_dir, "ModelCheckpoint: a checkpoint in DIR after each epoch"),
    INT("--keep", "N", keep, 0, 1000000, "with --checkpoint-dir: keep the newest N checkpoints (default 3, 0 = all)"),
    FLAG("--save-best-only", best_only, "with --checkpoint-dir: only when --monitor improved"),
    STR("--monitor", "NAME", monitor, "val_loss (default), loss, val_accuracy or accuracy"),
    INT("--early-stopping", "N", patience, 0, 1000000, "EarlyStopping: stop after N epochs without --monitor improving"),
    STR("--csv", "FILE", csv, "CSVLogger: epoch,loss,accuracy,val_loss,val_accuracy,lr per epoch"),
    STR("--log-dir", "DIR", log_dir, "TensorBoard event files (train/ and validation/)"),
    INT("--log-every", "N", log_every, 0, INT_MAX, "with --log-dir: batch figures every N steps (default 0 = per epoch only)"),
    STR("--plot", "FILE", plot, "draw loss and accuracy curves as an SVG after training"),
    FLAG("--quiet", quiet, "no progress output"),
    FLAG("--allow-nonfinite", allow_nonfinite, "accept NaN/Inf in float32 input files (default: exit 2 naming the element)"),
    STR("--features", "SPEC.json", features, "with --data tfrecord:PATTERN: the tf.train.Example features x and y (docs/FORMATS.md)"),
    STR("--test-data", "SRC", test_data, "with --data tfrecord:...: the test set, tfrecord:PATTERN (default: the Fashion-MNIST test set when the shapes match)"),
    STR("--compression", "C", compression, "with --data tfrecord:...: none or gzip (default: gzip when PATTERN ends in .gz)"),
    FLAG("--skip-corrupt-records", skip_corrupt, "with --data tfrecord:...: skip and count damaged records (default: exit 2 naming file and offset)"),
    INT("--shuffle-buffer", "N", shuffle_buffer, 0, 1L << 30, "shuffle buffer in elements, 0 = no shuffling (default: the whole training set; tfrecord: 10000)"),
    FN("--num-parallel-reads", "N", parallel_reads, store_parallel_reads, "with --data tfrecord:...: read N files at once, one record from each in turn, on N background threads (auto: one per core); as TFRecordDataset's num_parallel_reads (default: one file after the other)"),
    STR("--cache", "FILE", cache, "with --data tfrecord:...: the first epoch writes the parsed examples to FILE (per worker: FILE.worker-R), later epochs and runs read it (docs/FORMATS.md)"),
    STR("--cluster", "FILE", cluster, "parameter_server: the cluster JSON (with --task; default: TF_CONFIG)"),
    STR("--task", "TYPE:INDEX", task, "parameter_server: with --cluster, this process's task (chief:0)"),
    STR("--keys", "DIR", keys, "parameter_server: CURVE keys from 'strata keygen DIR' (default: $STRATA_KEYS)"),
    FLAG("--insecure", insecure, "parameter_server: no CURVE encryption or authentication (trusted networks only)"),
    INT("--steps-per-execution", "N", steps_per_execution, 1, 100000, "parameter_server: steps per closure (default 1)"),
    FLOAT("--heartbeat-interval", "S", heartbeat_interval, 0.01, 3600, "parameter_server: worker heartbeat period; lost after 3 missed (default 1)"),
    FLOAT("--coordinator-timeout", "S", coordinator_timeout, 0.1, 1e6, "parameter_server: servers exit 3 when the chief is silent this long (default 60)"),
    INT("--ps-shards", "K", ps_shards, 1, 1 << 20, "parameter_server: split every variable along axis 0 into K shards on different ps (FixedShardsPartitioner)"),
    INT("--ps-min-shard-bytes", "N", ps_min_shard_bytes, 1, 1L << 40, "parameter_server: split variables into shards of at least N bytes, at most one per ps (MinSizePartitioner)"),
    INT("--max-staleness", "K", max_staleness, 0, 1L << 40, "parameter_server: gradients of variables more than K versions old are recomputed from fresh ones (default: unbounded)"),
};
#undef STR
#undef FLAG
#undef INT
#undef FLOAT
#undef FN
#define NTRAIN ((int)(sizeof train_opts / sizeof *train_opts))
#define GIVEN(name) (cli_get(train_opts, NTRAIN, name) != NULL)

/* The values of the options not given. */
static void train_defaults(train_cfg *c) {
  memset(c, 0, sizeof *c);
  c->model = "cnn";
  c->data = "fashion-mnist";
  c->epochs = 1;
  c->val_freq = 1;
  c->batch = 32;
  c->bytes_per_pack = -1;
  c->keep = 3;
  c->patience = -1;
  c->opt_kind = ST_OPT_ADAM;
  c->strategy = ST_STRATEGY_ONE_DEVICE;
  c->auto_shard = ST_AUTO_SHARD_AUTO;
  c->shuffle_buffer = -1;
  c->steps_per_execution = 1;
  c->heartbeat_interval = 1.0;
  c->coordinator_timeout = 60.0;
  c->max_staleness = -1;
}

/* Outputs of the right type, none an input or another output, backup and
 * checkpoint directories apart (outputs.h); before anything is written. */
static bool check_paths(const train_cfg *c) {
  const cli_path files[] = {{"--save", c->save}, {"--report", c->report}, {"--csv", c->csv},
                            {"--plot", c->plot}, {"--cache", c->cache}}; /* cache: issue 29 D12 */
  const cli_path dirs[] = {{"--backup-dir", c->backup_dir}, {"--checkpoint-dir", c->ckpt_dir},
                           {"--log-dir", c->log_dir}};
  const cli_path inputs[] = {{"--model", cli_is_json_model(c->model) ? c->model : NULL},
                             {"--load-weights", c->load_weights}};
  const char *data = strcmp(c->data, "fashion-mnist") ? c->data : CLI_FASHION_MNIST_DIR;
  return cli_check_outputs("train", files, 5, dirs, 3, inputs, 2, data);
}

/* Flags that only make sense together, and monitors that exist. */
static bool check_callback_flags(const train_cfg *c) {
  const char *cmd = "strata train";
  if ((c->backup_every || c->resume_anyway) && !c->backup_dir) {
    fprintf(stderr, "%s: --%s needs --backup-dir\n", cmd,
            c->backup_every ? "backup-every" : "resume-anyway");
    return false;
  }
  if ((c->best_only || GIVEN("--keep")) && !c->ckpt_dir) {
    fprintf(stderr, "%s: --keep and --save-best-only need --checkpoint-dir\n", cmd);
    return false;
  }
  if (GIVEN("--log-every") && !c->log_dir) {
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
 * only with --strategy pipeline. */
static bool check_pipeline_flags(const train_cfg *c) {
  bool any = c->pipeline_stages || c->micro_batches || GIVEN("--pipeline-schedule") ||
             c->stage_boundaries;
  if (any && c->strategy != ST_STRATEGY_PIPELINE) {
    fprintf(stderr, "strata train: --pipeline-stages, --stage-boundaries, --micro-batches and "
            "--pipeline-schedule need --strategy pipeline\n");
    return false;
  }
  return true;
}

/* The parameter_server flags only with that strategy: checked before their
 * values (an unknown --strategy is left to cli_store). */
static bool check_ps_only(void) {
  static const char *const ps_only[] = {"--cluster", "--task", "--keys", "--insecure",
                                        "--steps-per-execution", "--heartbeat-interval",
                                        "--coordinator-timeout", "--max-staleness", "--ps-shards",
                                        "--ps-min-shard-bytes"};
  const char *v = cli_get(train_opts, NTRAIN, "--strategy");
  st_strategy_kind k = ST_STRATEGY_ONE_DEVICE;
  if (v && st_strategy_kind_parse(v, &k) != ST_OK) return true;
  for (size_t i = 0; i < sizeof ps_only / sizeof *ps_only; i++)
    if (k != ST_STRATEGY_PARAMETER_SERVER && GIVEN(ps_only[i])) {
      fprintf(stderr, "strata train: %s needs --strategy parameter_server\n", ps_only[i]);
      return false;
    }
  return true;
}

/* With parameter_server: the callbacks it does not run yet refused, one
 * partitioner. */
static bool check_ps_flags(const train_cfg *c) {
  static const char *const not_yet[] = {"--log-every", "--devices", "--replicas"};
  bool ps = c->strategy == ST_STRATEGY_PARAMETER_SERVER;
  for (size_t i = 0; ps && i < sizeof not_yet / sizeof *not_yet; i++)
    if (GIVEN(not_yet[i])) {
      fprintf(stderr, "strata train: %s is not supported with --strategy parameter_server yet\n",
              not_yet[i]);
      return false;
    }
  if (GIVEN("--ps-shards") && GIVEN("--ps-min-shard-bytes")) {
    fprintf(stderr, "strata train: --ps-shards and --ps-min-shard-bytes are two partitioners: give one\n");
    return false;
  }
  if (GIVEN("--keys") && GIVEN("--insecure")) {
    fprintf(stderr, "strata train: --keys and --insecure contradict each other: give one\n");
    return false;
  }
  double hb = c->heartbeat_interval, ct = c->coordinator_timeout; /* defaults 1, 60 */
  if (ct < 2 * hb) { /* issue 29 D10: the servers would take the live chief for lost */
    fprintf(stderr, "strata train: --coordinator-timeout %g is shorter than 2 x --heartbeat-interval "
            "(%g): the chief reaches the servers once per heartbeat interval, so they would "
            "exit while it is alive\n", ct, hb);
    return false;
  }
  return true;
}

/* --features, --test-data, --compression, --skip-corrupt-records,
 * --cache and --num-parallel-reads: tfrecord data only. */
static bool check_tfrecord_flags(const train_cfg *c) {
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
  if (c->compression && !cli_lib_ok("train", "--compression", st_compression_parse(c->compression, &comp)))
    return false;
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

/* --devices, --replicas, --cross-device-ops, --bytes-per-pack,
 * --no-overlap, --shard-optimizer, --auto-shard, --collective-timeout and
 * --threads: only with the strategies that have them. */
static bool check_strategy_flags(const train_cfg *c) {
  bool mwms = c->strategy == ST_STRATEGY_MULTI_WORKER_MIRRORED;
  bool multi = c->strategy == ST_STRATEGY_MIRRORED || c->strategy == ST_STRATEGY_CENTRAL_STORAGE || mwms;
  bool mirrored = c->strategy == ST_STRATEGY_MIRRORED || mwms;
  bool pipe = c->strategy == ST_STRATEGY_PIPELINE; /* under mpirun: --collective-timeout */
  const char *msg = NULL;
  bool od = c->strategy == ST_STRATEGY_ONE_DEVICE;
  if (!multi && (c->replicas || c->cross_ops || (c->devices && !pipe && !od)))
    msg = "--devices, --replicas and --cross-device-ops need --strategy mirrored, "
          "central_storage or multi_worker_mirrored (--devices: also one_device, one device)";
  else if (od && c->devices && strchr(c->devices, ','))
    msg = "--strategy one_device runs on one device: give one, e.g. --devices gpu:0";
  else if (c->precision && strcmp(c->precision, "fp32") && strcmp(c->precision, "tf32"))
    msg = strcmp(c->precision, "bf16") == 0
              ? "--precision bf16 is not built yet (fp32 or tf32)"
              : "--precision: expected fp32 or tf32";
  else if (!mirrored && (c->bytes_per_pack >= 0 || c->no_overlap))
    msg = "--bytes-per-pack and --no-overlap need --strategy mirrored or multi_worker_mirrored";
  else if (!mirrored && c->shard_optimizer)
    msg = "--shard-optimizer needs --strategy mirrored or multi_worker_mirrored";
  else if ((!mwms && GIVEN("--auto-shard")) || (!mwms && !pipe && GIVEN("--collective-timeout")))
    msg = "--auto-shard and --collective-timeout need --strategy multi_worker_mirrored";
  else if (c->threads && c->strategy != ST_STRATEGY_ONE_DEVICE)
    msg = "--threads is for --strategy one_device (use --replicas)";
  else if (c->sync_bn && (pipe || c->strategy == ST_STRATEGY_PARAMETER_SERVER))
    msg = "--sync-batchnorm needs --strategy one_device, mirrored, central_storage or "
          "multi_worker_mirrored (the pipeline normalises each micro-batch on its own, a "
          "parameter_server worker its own batch)";
  else if (c->sync_bn && cli_is_json_model(c->model))
    msg = "--sync-batchnorm is for the built-in models (a Keras JSON model says it per layer: "
          "BatchNormalization's \"synchronized\": true)";
  if (msg) fprintf(stderr, "strata train: %s\n", msg);
  return msg == NULL;
}

/* --load-weights readable (not with parameter_server); --model known; the
 * outputs' directories writable and the paths apart (check_paths). */
static bool check_files(const train_cfg *c) {
  const char *cmd = "train";
  if (c->load_weights && c->strategy == ST_STRATEGY_PARAMETER_SERVER) {
    fprintf(stderr, "strata train: --load-weights is not supported with --strategy parameter_server\n");
    return false;
  }
  if (c->load_weights && !cli_check_readable(cmd, "--load-weights", c->load_weights)) return false;
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
  fprintf(stderr, "strata train: --model: unknown model '%s' (built-in models: mlp, cnn, resnet20, mobilenet-tiny; or a "
          "Keras FILE.json)\n", c->model);
  return false;
}

/* --strategy parameter_server: this process is the chief (tools/ps_coord.c);
 * cb[n]: the epoch-level callbacks the flags ask for. */
static int run_ps(const train_cfg *c, const st_callback *cb, int n) {
  ps_train_args a;
  memset(&a, 0, sizeof a);
  a.model = c->model, a.data = c->data, a.save = c->save, a.report = c->report;
  a.epochs = c->epochs, a.batch = c->batch, a.seed = c->seed, a.train_examples = c->train_examples;
  a.val_split = c->val_split, a.lr = c->lr, a.opt = c->opt, a.quiet = c->quiet;
  a.cluster_file = c->cluster, a.task = c->task, a.keys = c->keys ? c->keys : getenv("STRATA_KEYS");
  a.insecure = c->insecure;
  a.steps_per_execution = c->steps_per_execution;
  a.heartbeat_interval = c->heartbeat_interval, a.coordinator_timeout = c->coordinator_timeout;
  a.max_staleness = c->max_staleness;
  a.ps_shards = c->ps_shards, a.ps_min_shard_bytes = c->ps_min_shard_bytes;
  a.backup_dir = c->backup_dir, a.backup_every = c->backup_every, a.resume_anyway = c->resume_anyway;
  a.callbacks = cb, a.ncallbacks = n, a.plot = c->plot;
  return ps_train(&a);
}

/* The options into c: values first (table order), then the combinations. */
static bool parse_train(train_cfg *c) {
  train_defaults(c);
  if (!check_ps_only() || !cli_store("train", train_opts, NTRAIN, c)) return false;
  c->opt = st_optimizer_default_options(c->opt_kind);
  if (GIVEN("--lr")) c->opt.lr = st_schedule_constant((float)c->lr);
  c->lr = c->opt.lr.initial;
  return check_pipeline_flags(c) && check_strategy_flags(c) && check_ps_flags(c) &&
         check_callback_flags(c) && check_tfrecord_flags(c) && check_files(c);
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

/* Model + strategy bound together and compiled. */
static st_status build_model(const char *name, const st_strategy_options *so, uint64_t seed,
                             bool sync_bn, const st_optimizer_options *opt,
                             st_strategy **strategy, st_model **model) {
  /* MPI's start-up has no timeout of its own (tools/watchdog.c) */
  double t = so->collective_timeout > 0 ? so->collective_timeout : ST_DEFAULT_COLLECTIVE_TIMEOUT;
  char what[256];
  snprintf(what, sizeof what, "strata train: the job's start-up (MPI_Init, the strategy's "
           "processes) did not finish within %g s (--collective-timeout + 10 s): a rank died or "
           "stalls during start-up", t + 10);
  cli_watchdog_arm(t + 10, what);
  st_status s = st_strategy_create(so, strategy);
  cli_watchdog_disarm();
  if (s != ST_OK) return s;
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  mo.seed = seed;
  mo.sync_batchnorm = sync_bn;
  mo.strategy = *strategy;
  if ((s = cli_create_model(name, mo, model)) != ST_OK) return s;
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

static st_status lock_dirs(const train_cfg *c, const st_strategy *strategy, dir_locks *l) {
  l->backup.fd = l->ckpt.fd = -1;
  char who[96];
  int workers = strategy ? st_strategy_worker_count(strategy) : 1;
  snprintf(who, sizeof who, "the chief of a %d-worker job", workers);
  const char *w = workers > 1 ? who : NULL; /* a second chief on one directory names the first */
  st_status s = c->backup_dir ? st__dir_lock_acquire(&l->backup, c->backup_dir, w) : ST_OK;
  if (s == ST_OK && c->ckpt_dir) s = st__dir_lock_acquire(&l->ckpt, c->ckpt_dir, w);
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
  st_status s = lock_dirs(c, NULL, &locks);
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

/* The strategy the flags ask for (tfrecord data: auto-shard by file). */
static st_strategy_options strategy_options(const train_cfg *c, bool tfr) {
  st_strategy_options so = st_strategy_default_options(c->strategy);
  so.threads = (int)c->threads;
  if (c->strategy == ST_STRATEGY_ONE_DEVICE) so.device = c->devices; /* gpu:0, cpu:0 */
  else so.devices = c->devices;
  so.logical_gpus = (int)c->logical_gpus;
  so.tf32 = c->precision && strcmp(c->precision, "tf32") == 0;
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
  return so;
}

/* A failure while training or writing: ST_ERR_IO exits 4 (naming the file), an input that
 * cannot be opened 2, one whose read fails 1 (issue 29 D17); anything else as cli_fail. */
static int train_fail(st_status s) {
  const char *e = st_last_error();
  bool input = s == ST_ERR_IO && (strstr(e, ": cannot open: ") || strstr(e, ": read failed: "));
  int rc = s == ST_ERR_IO ? (input ? (strstr(e, ": cannot open: ") ? EXIT_USAGE : EXIT_FAIL) : EXIT_WRITE)
                          : cli_fail("train", s);
  if (s == ST_ERR_IO) fprintf(stderr, "strata train: %s\n", e);
  return rc;
}

/* IDX data (tfrecord data waits for the strategy: load_tfrecord). */
static int load_idx(const train_cfg *c, cli_data *d) {
  int rc = cli_load_data("train", c->data, c->val_split, c->train_examples, (int)c->batch,
                         (uint64_t)c->seed, c->allow_nonfinite, d);
  if (!rc && c->shuffle_buffer >= 0)
    rc = cli_set_shuffle_buffer("train", d, c->shuffle_buffer ? c->shuffle_buffer : -1);
  return rc;
}

/* st_model_fit with the callbacks the flags ask for; an exit code. */
static int fit(const train_cfg *c, bool chief, st_model *model, const st_strategy *strategy,
               cli_data *d, const cli_tfrecord_args *ta, st_history *h) {
  callbacks cbs;
  st_status s = make_callbacks(c, chief, saves_everywhere(strategy), &cbs);
  if (s != ST_OK) return cli_fail("train", s);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = (int)c->epochs;
  fo.validation = d->val;
  fo.callbacks = cbs.cb;
  fo.ncallbacks = cbs.n;
  fo.backup_dir = c->backup_dir;
  fo.backup_every_steps = c->backup_every;
  fo.data_fingerprint = d->fingerprint;
  fo.resume_anyway = c->resume_anyway;
  fo.validation_freq = (int)c->val_freq;
  s = st_model_fit(model, d->train, &fo, h);
  free_callbacks(&cbs);
  if (cli_is_tfrecord(c->data)) s = cli_tfrecord_no_examples(ta, d, s); /* issue 29 D18 */
  if (cli_is_tfrecord(c->data) && !c->quiet) cli_tfrecord_report("train", ta, d);
  return s == ST_OK ? EXIT_OK : train_fail(s);
}

/* After fit: the test set, then (the chief) --plot, the result line,
 * --save and --report. */
static int finish_train(const train_cfg *c, bool chief, st_model *model, const st_strategy *strategy,
                        const st_history *h, const cli_data *d, double t0) {
  st_eval_result test = {0};
  st_status s = st_model_evaluate(model, d->test, &test);
  if (s == ST_OK && !chief && c->save && saves_everywhere(strategy))
    s = st_model_save_weights(model, c->save); /* sends its stage to the chief */
  if (s != ST_OK) return cli_fail("train", s);
  if (!chief) return EXIT_OK; /* the chief reports and writes */
  char title[PATH_MAX + 64]; /* the whole --model path (512 bytes cut it mid-UTF-8) */
  snprintf(title, sizeof title, "%s \u2014 %s", c->model, st_strategy_kind_name(c->strategy));
  if (c->plot && st_plot_history_svg(h, title, c->plot) != ST_OK) {
    fprintf(stderr, "strata train: --plot: %s\n", st_last_error());
    return EXIT_WRITE;
  }
  printf("test_loss: %.4f - test_accuracy: %.4f - samples/s: %.0f\n", test.loss, test.accuracy,
         h->samples_per_sec);
  if (c->save && st_model_save_weights(model, c->save) != ST_OK) {
    fprintf(stderr, "strata train: --save: %s\n", st_last_error());
    return EXIT_WRITE;
  }
  report_info ri = {c->model, st_strategy_kind_name(c->strategy), st_optimizer_name(c->opt.kind),
                    st_strategy_num_replicas_in_sync(strategy), (int)c->batch, (uint64_t)c->seed,
                    c->lr, d->n_train, d->n_val, h, test, st_now_seconds() - t0, strategy};
  if (c->report && report_write(c->report, &ri) != 0) {
    fprintf(stderr, "strata train: --report %s: could not write the file\n", c->report);
    return EXIT_WRITE;
  }
  return EXIT_OK;
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
  int rc = tfr ? EXIT_OK : load_idx(c, &d);
  if (rc) {
    cli_free_data(&d);
    return rc;
  }
  st_strategy *strategy = NULL;
  st_model *model = NULL;
  st_history h = {0};
  dir_locks locks = {{-1, 0}, {-1, 0}};
  bool chief = false;
  time_t started = time(NULL);
  st_strategy_options so = strategy_options(c, tfr);
  st_status s = build_model(c->model, &so, (uint64_t)c->seed, c->sync_bn, &c->opt, &strategy, &model);
  if (s == ST_OK && c->load_weights) s = st_model_load_weights(model, c->load_weights);
  const char *ranked[] = {"--save", "--backup-dir", "--checkpoint-dir"}; /* alike on every rank */
  bool given[] = {c->save != NULL, c->backup_dir != NULL, c->ckpt_dir != NULL};
  if (s != ST_OK) rc = cli_fail("train", s);
  else if ((rc = cli_check_rank_flags("train", strategy, ranked, given, 3)) == EXIT_OK && tfr)
    rc = load_tfrecord(c, &so, strategy, &ta, &d);
  if (rc == EXIT_OK) rc = cli_match_model_input("train", &d, st_model_input_shape(model));
  if (rc == EXIT_OK && (chief = st_strategy_is_chief(strategy)) &&
      (s = lock_dirs(c, strategy, &locks)) != ST_OK)
    rc = train_fail(s);
  if (rc == EXIT_OK)
    rc = cli_check_memory("train", model, d.n_train > 0 && d.n_train < c->batch ? d.n_train : c->batch,
                          "", st_optimizer_name(c->opt.kind),
                          "lower --batch-size, or split the model over processes with "
                          "--strategy pipeline under mpirun");
  if (rc == EXIT_OK) rc = fit(c, chief, model, strategy, &d, &ta, &h);
  if (rc == EXIT_OK) rc = finish_train(c, chief, model, strategy, &h, &d, t0);
  if (rc == EXIT_OK && chief) clean_stale(c, started);
  unlock_dirs(c, &locks);
  st_history_destroy(&h);
  st_model_destroy(model);
  st_strategy_destroy(strategy);
  cli_free_data(&d);
  return rc;
}

int cmd_train(int argc, char **argv) {
  if (cli_wants_gpt(argc, argv)) return cmd_train_gpt(argc, argv);
  int rc = cli_parse("train", TRAIN_USAGE, argc, argv, train_opts, NTRAIN);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  train_cfg c;
  if (!parse_train(&c)) return EXIT_USAGE;
  return run_train(&c);
}

/* ---- evaluate ---- */
typedef struct eval_cfg {
  const char *model, *weights, *data;
  long batch;
} eval_cfg;

static cli_opt eval_opts[] = {
    CLI_OPT_STR("--model", "NAME", eval_cfg, model, "built-in model the weights belong to: mlp, cnn, resnet20 or mobilenet-tiny, or the Keras FILE.json they were trained from (required)"),
    CLI_OPT_STR("--weights", "FILE", eval_cfg, weights, "safetensors file written by 'strata train --save' (required)"),
    CLI_OPT_STR("--data", "SRC", eval_cfg, data, "fashion-mnist (default) or a DIR of MNIST-style IDX files"),
    CLI_OPT_INT("--batch-size", "B", eval_cfg, batch, 1, 1 << 20, "evaluation batch size (default 256)"),
};
#define NEVAL ((int)(sizeof eval_opts / sizeof *eval_opts))

/* The weights of the model on the test set: the result line. */
static int evaluate(const eval_cfg *e, cli_data *d) {
  st_strategy *strategy = NULL;
  st_model *model = NULL;
  st_eval_result r;
  st_optimizer_options opt = st_optimizer_default_options(ST_OPT_ADAM);
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  st_status s = build_model(e->model, &so, 0, false, &opt, &strategy, &model);
  int rc = EXIT_OK;
  if (s == ST_OK && (rc = cli_match_model_input("evaluate", d, st_model_input_shape(model)))) {
    st_model_destroy(model);
    st_strategy_destroy(strategy);
    return rc;
  }
  if (s == ST_OK) s = st_model_load_weights(model, e->weights);
  if (s == ST_OK) s = st_model_evaluate(model, d->test, &r);
  if (s == ST_OK)
    printf("test_loss: %.4f - test_accuracy: %.4f - examples: %lld\n", r.loss, r.accuracy,
           (long long)r.examples);
  rc = s == ST_OK ? EXIT_OK : cli_fail("evaluate", s);
  st_model_destroy(model);
  st_strategy_destroy(strategy);
  return rc;
}

int cmd_evaluate(int argc, char **argv) {
  int rc = cli_parse("evaluate", "--model NAME --weights FILE [--data SRC]", argc, argv,
                     eval_opts, NEVAL);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  eval_cfg e = {NULL, NULL, "fashion-mnist", 256};
  if (!cli_get(eval_opts, NEVAL, "--model") || !cli_get(eval_opts, NEVAL, "--weights")) {
    fprintf(stderr, "strata evaluate: --model and --weights are required (see 'strata evaluate --help')\n");
    return EXIT_USAGE;
  }
  if (!cli_store("evaluate", eval_opts, NEVAL, &e)) return EXIT_USAGE;
  if ((cli_is_json_model(e.model) && !cli_check_readable("evaluate", "--model", e.model)) ||
      !cli_check_readable("evaluate", "--weights", e.weights))
    return EXIT_USAGE;
  cli_data d;
  if ((rc = cli_load_data("evaluate", e.data, 0, 0, (int)e.batch, 0, false, &d))) return rc;
  rc = evaluate(&e, &d);
  cli_free_data(&d);
  return rc;
}
