/* The second misuse suite (issue 34): calls a newcomer makes that crashed or
 * hung. Each case runs in a child process with a 10 s alarm, so a hang or a
 * signal is a failure naming the case, never a stuck test:
 *  - infinite datasets: fit / evaluate / predict on repeat(-1) are refused
 *    at once naming steps_per_epoch / validation_steps / steps, and run that
 *    many steps when given;
 *  - FIFOs in the place of every file a library call reads (Example spec,
 *    Keras JSON, IDX, CSV, TFRecord, weights, checkpoint, cache, st_read_file):
 *    an error, never a wait;
 *  - re-entrancy: st_strategy_run, fit, evaluate, predict, checkpoint save
 *    and restore, weights save from inside a step function refused on every
 *    replica of every run (one_device, mirrored 2 and 3, central_storage 2),
 *    and st_strategy_run / fit from inside a fit callback;
 *  - a custom loop over a dataset without labels, a strategy destroyed
 *    before st_strategy_run, st_example_serialize with bad counts and names;
 *  - parameter servers: a stop request is ST_ERR_STOPPED and the chief gives
 *    up after coordinator_timeout when servers never started; out-of-range
 *    options refused naming the field; st_ps_keygen; port 0 picked by
 *    st_ps_cluster_pick_ports; learning-rate schedules
 *    with impossible values refused by compile.
 * The NULL-pointer cases of every function are the generated test_null_args. */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "free_port.h"
#include "strata/ps.h"
#include "strata/strata.h"
#include "tmpdir.h"

/* ThreadSanitizer: libzmq (the parameter-server cases) is not instrumented:
 * its own threads' accesses are suppressed, as tests/test_ps_api.c does. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
  return "called_from_lib:libzmq.so\n"
         "called_from_lib:libsodium.so\n"
         "called_from_lib:libpgm-5.3.so.0\n"
         "race:libzmq.so\n"
         "race:libsodium.so\n"
         "race:libpgm-5.3.so.0\n";
}

static void check_failed(st_status s, st_status want, const char *needle, const char *what) {
  CHECK_MSG(s == want, "%s: got %s, want %s (%s)", what, st_status_string(s),
            st_status_string(want), st_last_error());
  CHECK_MSG(strstr(st_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
            st_last_error(), needle);
}
#define CHECK_FAILS(expr, want, needle) check_failed((expr), (want), (needle), #expr)

/* Run fn in a child with a 10 s alarm: a signal, a hang or a failed check is
 * one failed check here, named. */
static void in_child(void (*fn)(void), const char *name) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    check_failures_ = 0; /* this child's own */
    fn();
    _exit(check_failures_ ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: %s %d%s", name,
            WIFSIGNALED(status) ? "killed by signal" : "exit",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
            WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? " (hung for 10 s)" : "");
}
#define IN_CHILD(fn) in_child(fn, #fn)

enum { FEAT = 4, CLASSES = 3, ROWS = 32, BATCH = 4 };
static float X[ROWS * FEAT], Y[ROWS];

/* rows of X, Y (labels or not), batched */
static st_dataset *data(bool labels, bool forever) {
  st_tensor tx = {ST_F32, 2, {ROWS, FEAT}, X}, ty = {ST_F32, 1, {ROWS}, Y};
  st_dataset *d = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&tx, labels ? &ty : NULL, 1.0f, false, &d));
  if (forever) CHECK_OK(st_dataset_repeat(d, -1, &d));
  CHECK_OK(st_dataset_batch(d, BATCH, false, &d));
  return d;
}

/* Dense 8 relu -> Dense 3 under s (NULL: one device), compiled. */
static st_model *model(st_strategy *s) {
  st_model_options mo = st_model_default_options(st_shape1(FEAT));
  mo.strategy = s;
  st_model *m = NULL;
  st_layer *l = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  CHECK_OK(st_dense(8, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(CLASSES, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(m, &co));
  return m;
}

/* ---- 1. infinite datasets ------------------------------------------------- */
static void infinite_fit(void) {
  st_model *m = model(NULL);
  st_dataset *inf = data(true, true), *fin = data(true, false);
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK_FAILS(st_model_fit(m, inf, &fo, &h), ST_ERR_INVALID, "o->steps_per_epoch");
  CHECK(strstr(st_last_error(), "st_model_fit: the training dataset is infinite") != NULL);
  fo.steps_per_epoch = 3;
  fo.epochs = 2;
  CHECK_OK(st_model_fit(m, inf, &fo, &h));
  CHECK_EQ(h.epochs, 2);
  if (h.epochs == 2) CHECK(h.logs[0].steps == 3 && h.logs[1].steps == 3);
  if (h.epochs == 2) CHECK_EQ(h.logs[1].examples, 3 * BATCH);
  st_history_destroy(&h);
  fo.validation = inf; /* an infinite validation set needs validation_steps */
  CHECK_FAILS(st_model_fit(m, fin, &fo, &h), ST_ERR_INVALID, "o->validation_steps");
  fo.validation_steps = 2;
  CHECK_OK(st_model_fit(m, fin, &fo, &h));
  CHECK(h.epochs == 2 && h.logs[0].has_validation);
  st_history_destroy(&h);
  fo.steps_per_epoch = -1;
  CHECK_FAILS(st_model_fit(m, fin, &fo, &h), ST_ERR_INVALID, "o->steps_per_epoch -1 is negative");
  st_dataset_destroy(inf);
  st_dataset_destroy(fin);
  st_model_destroy(m);
}

static void infinite_evaluate_predict(void) {
  st_model *m = model(NULL);
  st_dataset *inf = data(true, true);
  st_eval_result ev;
  st_tensor t;
  CHECK_FAILS(st_model_evaluate(m, inf, &ev), ST_ERR_INVALID, "give steps");
  CHECK(strstr(st_last_error(), "st_model_evaluate: the dataset is infinite") != NULL);
  CHECK_FAILS(st_model_predict(m, inf, &t), ST_ERR_INVALID, "st_model_predict: the dataset is infinite");
  CHECK_FAILS(st_model_evaluate_steps(m, inf, -2, &ev), ST_ERR_INVALID, "steps -2 is negative");
  CHECK_OK(st_model_evaluate_steps(m, inf, 5, &ev));
  CHECK_EQ(ev.examples, 5 * BATCH);
  CHECK_OK(st_model_predict_steps(m, inf, 3, &t));
  CHECK(t.rank == 2 && t.dims[0] == 3 * BATCH && t.dims[1] == CLASSES);
  st_tensor_destroy(&t);
  st_dataset_destroy(inf);
  st_model_destroy(m);
}

/* ---- 2. FIFOs where files are read ----------------------------------------- */
static const char *fifo(const char *name) {
  const char *p = tmp_path(name);
  unlink(p);
  CHECK_MSG(mkfifo(p, 0600) == 0, "mkfifo %s", p);
  return p;
}

static void fifo_readers(void) {
  st_example_spec spec;
  CHECK(st_example_spec_load(fifo("spec.json"), &spec) != ST_OK);
  CHECK(strstr(st_last_error(), "not a regular file") != NULL);
  st_model_options mo = st_model_default_options(st_shape1(FEAT));
  st_model *km = NULL;
  CHECK(st_model_from_keras_json(fifo("model.json"), &mo, &km) != ST_OK && !km);
  st_tensor t, y;
  CHECK(st_idx_read(fifo("x.idx"), &t) != ST_OK);
  CHECK(st_csv_read(fifo("x.csv"), NULL, &t, &y) != ST_OK);
  st_tfrecord_reader *r = NULL;
  CHECK(st_tfrecord_reader_create(fifo("x.tfrecord"), NULL, &r) != ST_OK);
  char *buf = NULL;
  size_t len = 0;
  CHECK(st_read_file(fifo("any"), 1 << 20, &buf, &len) != ST_OK && !buf);
  st_model *m = model(NULL);
  CHECK(st_model_load_weights(m, fifo("w.safetensors")) != ST_OK);
  CHECK_MSG(mkdir(tmp_path("ckpt"), 0700) == 0, "mkdir ckpt");
  CHECK(st_checkpoint_restore(m, fifo("ckpt/latest")) != ST_OK);
  CHECK(st_checkpoint_restore(m, tmp_path("ckpt")) != ST_OK);
  st_dataset *d = data(true, false); /* the cache file a FIFO: the pass fails */
  CHECK_OK(st_dataset_cache(d, fifo("cache.bin"), &d));
  st_eval_result ev;
  CHECK(st_model_evaluate(m, d, &ev) != ST_OK);
  st_dataset_destroy(d);
  st_model_destroy(m);
}

/* ---- 3. re-entrancy ---------------------------------------------------------- */
typedef struct reenter {
  st_model *m;
  st_strategy *s;
  st_dataset *ds;
  const st_batch *b;
  char ckpt[256], weights[256]; /* tmp_path's buffers are not for threads */
  int refused[16]; /* per replica: calls refused with the message */
  int calls;       /* the verbs tried per replica (7; set before the runs) */
} reenter;

static st_status noop_step(st_replica_context *c, void *arg) {
  (void)c, (void)arg;
  return ST_OK;
}

/* every verb of the strategy's model, from inside its own step function */
static st_status reentrant_step(st_replica_context *c, void *arg) {
  reenter *a = arg;
  int id = st_replica_id(c), n = 0, ok = 0;
  const char *want = "cannot be called from inside st_strategy_run's step function";
  st_fit_options fo = st_fit_default_options();
  st_history h;
  st_eval_result ev;
  st_tensor t;
  st_checkpoint_options co = st_checkpoint_default_options();
  st_status got[7] = {
      st_strategy_run(a->s, noop_step, NULL), st_model_fit(a->m, a->ds, &fo, &h),
      st_model_evaluate(a->m, a->ds, &ev),     st_model_predict(a->m, a->ds, &t),
      st_checkpoint_save(a->m, a->ckpt, &co), st_checkpoint_restore(a->m, a->ckpt),
      st_model_save_weights(a->m, a->weights)};
  for (n = 0; n < 7; n++) ok += got[n] == ST_ERR_INVALID;
  if (ok != n || !strstr(st_last_error(), want))
    fprintf(stderr, "  replica %d: %d of %d refused; last message: %s\n", id, ok, n, st_last_error());
  /* the last message is the last call's (per thread) */
  if (ok == n && strstr(st_last_error(), want)) a->refused[id] = n;
  st_batch local = st_replica_slice(c, a->b);
  st_status s = st_replica_compute_gradients(c, &local, a->b->size, NULL, NULL);
  return s != ST_OK ? s : st_replica_apply_gradients(c);
}

static void reenter_under(st_strategy_kind kind, int replicas) {
  st_strategy_options so = st_strategy_default_options(kind);
  if (kind == ST_STRATEGY_ONE_DEVICE) so.threads = 1;
  else if (kind == ST_STRATEGY_PIPELINE) so.pipeline_stages = replicas;
  else so.replicas = replicas;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model *m = model(s);
  st_batch b = {ROWS, X, Y};
  reenter a = {.m = m, .s = s, .ds = data(true, false), .b = &b, .calls = 7};
  snprintf(a.ckpt, sizeof a.ckpt, "%s", tmp_path("re_ckpt"));
  snprintf(a.weights, sizeof a.weights, "%s", tmp_path("re.safetensors"));
  for (int run = 0; run < 20; run++) { /* every run, not some of the time */
    memset(a.refused, 0, sizeof a.refused);
    CHECK_OK(st_strategy_run(s, reentrant_step, &a));
    int n = st_strategy_num_replicas_in_sync(s);
    for (int r = 0; r < n; r++)
      CHECK_MSG(a.refused[r] == a.calls, "%s, %d replicas, run %d: replica %d: %d of %d "
                "re-entrant calls refused with the message", st_strategy_kind_name(kind), n,
                run, r, a.refused[r], a.calls);
  }
  st_history h; /* the strategy works normally afterwards */
  st_fit_options fo = st_fit_default_options();
  CHECK_OK(st_model_fit(m, a.ds, &fo, &h));
  st_history_destroy(&h);
  st_dataset_destroy(a.ds);
  st_model_destroy(m);
  st_strategy_destroy(s);
}

static void reenter_one_device(void) { reenter_under(ST_STRATEGY_ONE_DEVICE, 1); }
static void reenter_mirrored(void) {
  reenter_under(ST_STRATEGY_MIRRORED, 2);
  reenter_under(ST_STRATEGY_MIRRORED, 3);
}
static void reenter_central_storage(void) { reenter_under(ST_STRATEGY_CENTRAL_STORAGE, 2); }

typedef struct cb_state {
  reenter *a;
  int refused, evaluated;
} cb_state;

static st_status cb_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  (void)l;
  cb_state *c = user;
  st_fit_options fo = st_fit_default_options();
  st_history h;
  st_eval_result ev;
  const char *want = "cannot be called from inside st_model_fit";
  if (st_model_fit(m, c->a->ds, &fo, &h) == ST_ERR_INVALID && strstr(st_last_error(), want) &&
      st_strategy_run(c->a->s, noop_step, NULL) == ST_ERR_INVALID &&
      strstr(st_last_error(), want))
    c->refused++;
  if (st_model_evaluate(m, c->a->ds, &ev) == ST_OK) c->evaluated++; /* allowed, as Keras */
  return ST_OK;
}

/* fit with a callback that tries a nested fit and st_strategy_run (refused)
 * and evaluate (allowed) at every epoch end, under every in-process kind
 * (the pipeline has no custom loop: its st_strategy_run is refused anyway) */
static void fit_callback_under(st_strategy_kind kind, int n) {
  st_strategy_options so = st_strategy_default_options(kind);
  if (kind == ST_STRATEGY_ONE_DEVICE) so.threads = 1;
  else if (kind == ST_STRATEGY_PIPELINE) so.pipeline_stages = n;
  else so.replicas = n;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  reenter a = {.m = model(s), .s = s, .ds = data(true, false)};
  cb_state c = {&a, 0, 0};
  st_callback cb = {.user = &c, .on_epoch_end = cb_epoch_end};
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 5;
  fo.callbacks = &cb;
  fo.ncallbacks = 1;
  st_history h;
  CHECK_OK(st_model_fit(a.m, a.ds, &fo, &h));
  CHECK_MSG(c.refused == 5 && c.evaluated == 5, "%s: %d of 5 epochs refused, %d evaluated",
            st_strategy_kind_name(kind), c.refused, c.evaluated);
  st_history_destroy(&h);
  st_dataset_destroy(a.ds);
  st_model_destroy(a.m);
  st_strategy_destroy(s);
}

static void reenter_fit_callback(void) {
  fit_callback_under(ST_STRATEGY_ONE_DEVICE, 1);
  fit_callback_under(ST_STRATEGY_MIRRORED, 2);
  fit_callback_under(ST_STRATEGY_CENTRAL_STORAGE, 2);
  fit_callback_under(ST_STRATEGY_PIPELINE, 2);
}

/* ---- 4. the rest -------------------------------------------------------------- */
typedef struct nolabel {
  st_dataset *ds;
  st_status got;
} nolabel;

/* one batch of a dataset without labels into compute_gradients */
static st_status nolabel_step(st_replica_context *c, void *arg) {
  nolabel *a = arg;
  st_iterator *it = NULL;
  st_batch b;
  bool end = false;
  st_status s = st_dataset_iterate(a->ds, &it);
  if (s == ST_OK) s = st_iterator_next(it, &b, &end);
  if (s == ST_OK && !end) {
    CHECK(b.y == NULL);
    st_batch local = st_replica_slice(c, &b);
    a->got = st_replica_compute_gradients(c, &local, b.size, NULL, NULL);
    CHECK_MSG(strstr(st_last_error(), "local->y is NULL") != NULL, "message: %s", st_last_error());
  }
  st_iterator_destroy(it);
  return a->got;
}

static void custom_loop_no_labels(void) {
  st_model *m = model(NULL);
  (void)m;
  nolabel a = {data(false, false), ST_OK};
  /* the model's default strategy is not reachable: run with a one-device one */
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model *m2 = model(s);
  CHECK(st_strategy_run(s, nolabel_step, &a) == ST_ERR_INVALID);
  CHECK_EQ(a.got, ST_ERR_INVALID);
  st_dataset_destroy(a.ds);
  st_model_destroy(m2);
  st_strategy_destroy(s);
  st_model_destroy(m);
}

static void destroyed_strategy_run(void) {
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  so.replicas = 2;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model *m = model(s);
  st_strategy_destroy(s); /* kept alive by m, refusing every verb */
  CHECK_FAILS(st_strategy_run(s, noop_step, NULL), ST_ERR_INVALID, "the strategy was destroyed");
  float per[2] = {1, 2}, sum = 0;
  CHECK_FAILS(st_strategy_reduce(s, ST_REDUCE_SUM, per, 1, &sum), ST_ERR_INVALID,
              "st_strategy_reduce: the strategy was destroyed");
  st_dataset *d = data(true, false);
  st_eval_result ev;
  CHECK_FAILS(st_model_evaluate(m, d, &ev), ST_ERR_INVALID, "its strategy was destroyed");
  st_dataset_destroy(d);
  st_model_destroy(m);
}

static void example_serialize_counts(void) {
  float v[2] = {1, 2};
  st_feature_value f = {"x", ST_FEATURE_FLOAT32, v, 2};
  void *out = NULL;
  size_t n = 0;
  CHECK_FAILS(st_example_serialize(&f, -1, &out, &n), ST_ERR_INVALID, "n is -1");
  f.name = NULL;
  CHECK_FAILS(st_example_serialize(&f, 1, &out, &n), ST_ERR_INVALID, "f[0].name is NULL");
  f.name = "x";
  f.data = NULL;
  CHECK_FAILS(st_example_serialize(&f, 1, &out, &n), ST_ERR_INVALID, "data is NULL with count 2");
  f.dtype = (st_feature_dtype)7;
  CHECK_FAILS(st_example_serialize(&f, 1, &out, &n), ST_ERR_INVALID, "dtype 7");
  CHECK_OK(st_example_serialize(NULL, 0, &out, &n)); /* an empty Example */
  free(out);
}

/* ---- 5. parameter servers, schedules ------------------------------------------- */
static void ps_cluster(char *buf, size_t n, const char *type) {
  int p[3] = {free_port(), free_port(), free_port()};
  snprintf(buf, n, "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"], "
           "\"ps\": [\"127.0.0.1:%d\"]}, \"task\": {\"type\": \"%s\", \"index\": 0}}", p[0], p[1],
           p[2], type);
}
static bool stop_always(void *user) { return (void)user, true; }
static void quiet(void *user, const char *line) { (void)user, (void)line; }

/* servers that never started: a stop request is ST_ERR_STOPPED, and the
 * chief gives up after coordinator_timeout (1 s here; the 10 s alarm catches
 * the 120 s it used to wait) */
static void ps_stop_and_timeout(void) {
  char cfg[512];
  ps_cluster(cfg, sizeof cfg, "chief");
  st_ps_train_options o = st_ps_train_default_options();
  o.model = "mlp", o.data = "unused", o.n_train = 10, o.tf_config = cfg, o.insecure = true;
  o.on_message = quiet, o.quiet = true;
  o.should_stop = stop_always;
  st_ps_train_result r;
  st_status s = st_ps_train(&o, &r);
  if (s == ST_ERR_NOT_BUILT) return; /* no ZeroMQ in this build */
  CHECK_MSG(s == ST_ERR_STOPPED, "stop request: %s: %s", st_status_string(s), st_last_error());
  /* (a timeout under 2 heartbeats is refused: issue 29 D10) */
  o.should_stop = NULL, o.coordinator_timeout = 1.0, o.heartbeat_interval = 0.5;
  CHECK_FAILS(st_ps_train(&o, &r), ST_ERR_PEER, "did not answer");
}

static void ps_option_ranges(void) {
  char cfg[512];
  ps_cluster(cfg, sizeof cfg, "chief");
  st_ps_train_options base = st_ps_train_default_options();
  base.model = "mlp", base.data = "unused", base.n_train = 10, base.tf_config = cfg;
  base.insecure = true, base.on_message = quiet, base.quiet = true;
  st_ps_train_result r;
  st_ps_train_options o;
#define BAD(stmt, needle)                                            \
  o = base;                                                          \
  stmt;                                                              \
  CHECK_FAILS(st_ps_train(&o, &r), ST_ERR_INVALID, needle)
  BAD(o.heartbeat_interval = -1, "heartbeat_interval: -1");
  BAD(o.heartbeat_interval = NAN, "heartbeat_interval: nan");
  BAD(o.coordinator_timeout = -5, "coordinator_timeout: -5");
  BAD(o.steps_per_execution = -1, "steps_per_execution: -1 is negative");
  BAD(o.ps_shards = -2, "ps_shards: -2 is negative");
  BAD(o.ps_min_shard_bytes = -1, "ps_min_shard_bytes: -1 is negative");
  BAD(o.backup_every = -1, "backup_every: -1 is negative");
  BAD(o.train_examples = -1, "train_examples: -1 is negative");
  BAD(o.val_split = 1.5, "val_split: 1.5");
  BAD(o.batch = (int64_t)1 << 40, "batch: 1099511627776");
  BAD(o.optimizer.kind = (st_optimizer_kind)9, "optimizer.kind: 9");
  BAD(o.optimizer.lr.kind = ST_SCHEDULE_COSINE; o.optimizer.lr.decay_steps = 10;
      o.optimizer.lr.alpha = -1, "cosine alpha -1");
#undef BAD
  st_ps_server_options so = st_ps_server_default_options();
  so.tf_config = cfg, so.insecure = true, so.job_timeout = -1;
  CHECK_FAILS(st_ps_server_run(&so), ST_ERR_INVALID, "job_timeout: -1");
}

static void schedule_values(void) {
  st_model *m = model(NULL);
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer.lr = (st_schedule){ST_SCHEDULE_COSINE, 0.1f, 100, 1.0f, false, -1.0f, 0, 0.0f};
  CHECK_FAILS(st_model_compile(m, &co), ST_ERR_INVALID, "o->optimizer.lr: st_schedule_check: cosine alpha -1");
  co.optimizer.lr = (st_schedule){ST_SCHEDULE_EXPONENTIAL, 0.1f, 100, -0.5f, false, 0, 0, 0.0f};
  CHECK_FAILS(st_model_compile(m, &co), ST_ERR_INVALID, "decay_rate -0.5");
  co.optimizer.lr = (st_schedule){ST_SCHEDULE_COSINE, 0.1f, -3, 1.0f, false, 0, 0, 0.0f};
  CHECK_FAILS(st_model_compile(m, &co), ST_ERR_INVALID, "decay_steps -3 is negative");
  co.optimizer.lr = (st_schedule){ST_SCHEDULE_COSINE, INFINITY, 10, 1.0f, false, 0, 0, 0.0f};
  CHECK_FAILS(st_model_compile(m, &co), ST_ERR_INVALID, "initial learning rate inf");
  co.optimizer.lr = (st_schedule){ST_SCHEDULE_COSINE, 0.1f, 100, 1.0f, false, 0.1f, 0, 0.0f};
  CHECK_OK(st_model_compile(m, &co));
  for (int64_t step = 0; step < 300; step += 7) CHECK(st_schedule_lr(&co.optimizer.lr, step) > 0);
  st_model_destroy(m);
}

static void ps_keygen(void) {
  char cfg[512];
  ps_cluster(cfg, sizeof cfg, "chief");
  st_status s = st_ps_keygen(cfg, NULL, tmp_path("keys"));
  if (s == ST_ERR_NOT_BUILT) return;
  CHECK_OK(s);
  struct stat sb;
  CHECK(stat(tmp_path("keys/chief-0.pub"), &sb) == 0);
  CHECK(stat(tmp_path("keys/ps-0.secret"), &sb) == 0 && (sb.st_mode & 077) == 0);
  CHECK_FAILS(st_ps_keygen("{", NULL, tmp_path("keys2")), ST_ERR_FORMAT, "");
}

/* port 0: every such address gets its own free port; the text stays a cluster */
static void ps_pick_ports(void) {
  const char *in = "{\"cluster\": {\"chief\": [\"127.0.0.1:0\"], \"worker\": [\"127.0.0.1:0\", "
                   "\"127.0.0.1:0\"], \"ps\": [\"127.0.0.1:0\"]}, \"task\": {\"type\": \"chief\", "
                   "\"index\": 0}}";
  char *out = NULL;
  CHECK_OK(st_ps_cluster_pick_ports(in, &out));
  if (!out) return;
  CHECK(strstr(out, ":0\"") == NULL);
  int ports[4] = {0}, n = 0;
  for (const char *p = out; n < 4 && (p = strstr(p, "127.0.0.1:")) != NULL; p += 10)
    ports[n++] = atoi(p + 10);
  CHECK_EQ(n, 4);
  for (int i = 0; i < n; i++) {
    CHECK(ports[i] > 0 && ports[i] < 65536);
    for (int j = 0; j < i; j++) CHECK(ports[i] != ports[j]);
  }
  st_status s = st_ps_keygen(out, NULL, tmp_path("keys_picked"));
  CHECK(s == ST_OK || s == ST_ERR_NOT_BUILT); /* the picked text is a valid cluster */
  free(out);
  CHECK_FAILS(st_ps_cluster_pick_ports("[1", &out), ST_ERR_FORMAT, "st_ps_cluster_pick_ports: line 1");
  CHECK(out == NULL);
}

static void test_infinite(void) {
  IN_CHILD(infinite_fit);
  IN_CHILD(infinite_evaluate_predict);
}
static void test_fifo(void) { IN_CHILD(fifo_readers); }
static void test_reentrancy(void) {
  IN_CHILD(reenter_one_device);
  IN_CHILD(reenter_mirrored);
  IN_CHILD(reenter_central_storage);
  IN_CHILD(reenter_fit_callback);
}
static void test_rest(void) {
  IN_CHILD(custom_loop_no_labels);
  IN_CHILD(destroyed_strategy_run);
  IN_CHILD(example_serialize_counts);
}

static void test_ps_schedule(void) {
  IN_CHILD(ps_stop_and_timeout);
  IN_CHILD(ps_option_ranges);
  IN_CHILD(schedule_values);
  IN_CHILD(ps_keygen);
  IN_CHILD(ps_pick_ports);
}

static const check_case cases[] = {
    CHECK_CASE(test_ps_schedule),
    CHECK_CASE(test_infinite),
    CHECK_CASE(test_fifo),
    CHECK_CASE(test_reentrancy),
    CHECK_CASE(test_rest),
};

int main(int argc, char **argv) {
  for (int i = 0; i < ROWS; i++) {
    Y[i] = (float)(i % CLASSES);
    for (int f = 0; f < FEAT; f++) X[i * FEAT + f] = (float)((i * 7 + f * 3) % 11) / 11.0f;
  }
  if (!tmpdir_make("strata_misuse2")) return 1;
  int rc = CHECK_MAIN(argc, argv, cases);
  tmpdir_remove();
  return rc;
}
