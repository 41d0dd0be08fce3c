/* `strata train --strategy parameter_server`: the chief of a parameter-server
 * job. The CLI's part: the cluster checks and warnings with its exit codes,
 * the data (cli_load_data), messages on stderr, then the library's chief
 * (st_ps_train, src/train/ps_chief.c) and, after it, the test evaluation,
 * the per-ps lines, --plot, --save and --report (ps.h has the protocol). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "ps.h"
#include "report.h"
#include "strata/ps.h"

static volatile sig_atomic_t g_ps_stop;
static void on_stop(int sig) { (void)sig, g_ps_stop = 1; }
static bool should_stop(void *user) { return (void)user, g_ps_stop != 0; }
static void on_message(void *user, const char *line) { (void)user, fprintf(stderr, "strata train: %s\n", line); }
static void on_progress(void *user, const char *line) { (void)user, fprintf(stderr, "%s\n", line); }

typedef struct chief_data {
  cli_data *d;
  int rc; /* of cli_match_model_input */
} chief_data;

/* The model is built: its input decides whether the images are flattened. */
static st_status prepare(void *user, st_model *m, st_dataset **validation) {
  chief_data *cd = user;
  if ((cd->rc = cli_match_model_input("train", cd->d, st_model_input_shape(m))))
    return st_error(ST_ERR_INVALID, "the data does not fit the model");
  *validation = cd->d->val;
  return ST_OK;
}

static int fail_rc(st_status s) {
  if (s == ST_ERR_PEER || s == ST_ERR_TIMEOUT) return EXIT_PEER;
  if (s == ST_ERR_STOPPED) return EXIT_STOPPED;
  if (s == ST_ERR_NOMEM || s == ST_ERR_INTERNAL || s == ST_ERR_IO) return EXIT_FAIL;
  return EXIT_USAGE;
}

static st_ps_train_options train_options(const ps_train_args *a, cli_data *d, chief_data *cd) {
  st_ps_train_options o = st_ps_train_default_options();
  o.cluster_file = a->cluster_file, o.task = a->task, o.keys_dir = a->keys, o.insecure = a->insecure;
  o.model = a->model, o.data = a->data, o.n_train = d->n_train, o.data_fingerprint = d->fingerprint;
  o.validation = d->val;
  o.epochs = a->epochs, o.batch = a->batch, o.seed = a->seed, o.train_examples = a->train_examples;
  o.val_split = a->val_split, o.optimizer = a->opt;
  o.steps_per_execution = a->steps_per_execution, o.heartbeat_interval = a->heartbeat_interval;
  o.coordinator_timeout = a->coordinator_timeout, o.max_staleness = a->max_staleness;
  o.ps_shards = a->ps_shards, o.ps_min_shard_bytes = a->ps_min_shard_bytes;
  o.backup_dir = a->backup_dir, o.backup_every = a->backup_every, o.resume_anyway = a->resume_anyway;
  o.keep_backup = true; /* deleted below once the outputs are written */
  o.callbacks = a->callbacks, o.ncallbacks = a->ncallbacks;
  o.prepare = prepare, o.prepare_user = cd;
  o.on_message = on_message, o.on_progress = on_progress, o.should_stop = should_stop;
  o.quiet = a->quiet;
  return o;
}

/* After st_ps_train: the test set, the per-ps lines, the outputs. */
static int finish(const ps_train_args *a, cli_data *d, st_ps_train_result *r, double t0) {
  int rc = EXIT_OK;
  st_eval_result test = {0};
  st_status s = st_model_evaluate(r->model, d->test, &test);
  if (s != ST_OK) {
    fprintf(stderr, "strata train: %s\n", st_last_error());
    return fail_rc(s);
  }
  for (int p = 0; p < r->nps; p++)
    fprintf(stderr, "parameter_server: ps:%d applied %llu of %lld steps (%llu duplicates skipped, "
            "%llu frames dropped)\n", p, (unsigned long long)r->per_ps[p].updates_applied,
            (long long)r->history.epochs * r->steps_per_epoch, (unsigned long long)r->per_ps[p].duplicates_skipped,
            (unsigned long long)r->per_ps[p].frames_dropped);
  printf("test_loss: %.4f - test_accuracy: %.4f - samples/s: %.0f\n", test.loss, test.accuracy,
         r->history.samples_per_sec);
  if (!r->exactly_once) {
    fprintf(stderr, "strata train: parameter_server: a ps did not apply every step exactly once\n");
    rc = EXIT_FAIL;
  }
  if (a->plot) {
    char title[1100];
    snprintf(title, sizeof title, "%s \u2014 parameter_server", a->model);
    if (st_plot_history_svg(&r->history, title, a->plot) != ST_OK) {
      fprintf(stderr, "strata train: --plot: %s\n", st_last_error());
      rc = EXIT_WRITE;
    }
  }
  if (a->save && st_model_save_weights(r->model, a->save) != ST_OK) {
    fprintf(stderr, "strata train: --save: %s\n", st_last_error());
    rc = EXIT_WRITE;
  }
  report_info ri = {a->model, "parameter_server", st_optimizer_name(a->opt.kind), r->workers, (int)a->batch,
                    (uint64_t)a->seed, a->lr, d->n_train, d->n_val, &r->history, test, st_now_seconds() - t0,
                    NULL};
  if ((rc == EXIT_OK || !r->exactly_once) && a->report && /* not exact: the report says where */
      report_write_extra(a->report, &ri, "parameter_server", r->report_json) != 0) {
    fprintf(stderr, "strata train: --report %s: could not write the file\n", a->report);
    rc = EXIT_WRITE;
  }
  if (rc == EXIT_OK && a->backup_dir) st__checkpoint_remove_all(a->backup_dir); /* as fit */
  return rc;
}

int ps_train(const ps_train_args *a) {
  double t0 = st_now_seconds();
  const char *role; /* the task, checked here first: the CLI's messages and exit codes */
  int index;
  int rc = ps_load_task("train", a->cluster_file, a->task, &role, &index);
  if (rc) return rc;
  if (strcmp(role, "chief")) {
    fprintf(stderr, "strata train: task %s:%d: --strategy parameter_server runs on the chief; start "
            "workers and ps with 'strata server'\n", role, index);
    return EXIT_USAGE;
  }
  if (a->insecure)
    fprintf(stderr, "strata train: warning: --insecure: no encryption or authentication; any "
            "process that reaches the cluster's ports can change the model\n");
  cli_data d;
  memset(&d, 0, sizeof d);
  if ((rc = cli_load_data("train", a->data, a->val_split, a->train_examples, (int)a->batch,
                          (uint64_t)a->seed, false, &d)))
    return rc;
  struct sigaction sa, old_term, old_int;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGINT, &sa, &old_int);
  chief_data cd = {&d, 0};
  st_ps_train_options o = train_options(a, &d, &cd);
  st_ps_train_result r;
  st_status s = st_ps_train(&o, &r);
  if (s == ST_OK) {
    rc = finish(a, &d, &r, t0);
  } else if (cd.rc) {
    rc = cd.rc; /* cli_match_model_input said why */
  } else {
    fprintf(stderr, "strata train: %s\n", st_last_error());
    rc = fail_rc(s);
  }
  st_ps_train_result_free(&r);
  cli_free_data(&d);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGINT, &old_int, NULL);
  return rc;
}
