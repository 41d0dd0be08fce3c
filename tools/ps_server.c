/* strata server: a worker or ps task of a parameter-server job (ps.h has the
 * protocol): the options, the training data (cli_load_data, as the chief
 * loads it) and the messages on stderr around the library's server loop
 * (st_ps_server_run, src/train/ps_server.c). It exits 3 when the chief has
 * been silent for the job's coordinator timeout. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps.h"
#include "strata/ps.h"

#define SERVER_USAGE "[--cluster FILE --task TYPE:INDEX] [--keys DIR | --insecure]"

typedef struct server_cfg {
  const char *cluster, *task, *keys;
  bool insecure;
  double job_timeout;
} server_cfg;

static cli_opt server_opts[] = {
    CLI_OPT_STR("--cluster", "FILE", server_cfg, cluster, "cluster JSON ({\"chief\": [...], \"worker\": [...], \"ps\": [...]}); default: TF_CONFIG"),
    CLI_OPT_STR("--task", "TYPE:INDEX", server_cfg, task, "with --cluster: this process's task, e.g. worker:0 or ps:1"),
    CLI_OPT_STR("--keys", "DIR", server_cfg, keys, "CURVE keys written by 'strata keygen DIR' (default: $STRATA_KEYS)"),
    CLI_OPT_FLAG("--insecure", server_cfg, insecure, "no CURVE encryption or authentication (trusted networks only)"),
    CLI_OPT_FLOAT("--job-timeout", "S", server_cfg, job_timeout, 0.1, 1e6, "exit 3 when no JOB came from the chief within S seconds (default 120)"),
};
#define NSERVER ((int)(sizeof server_opts / sizeof *server_opts))

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig, g_stop = 1; }
static bool should_stop(void *user) { return (void)user, g_stop != 0; }
static void on_message(void *user, const char *line) { (void)user, fprintf(stderr, "strata server: %s\n", line); }

/* The job's training set, loaded as the chief loads it. */
typedef struct server_data {
  cli_data d;
  bool loaded;
} server_data;

static st_status load_data(void *user, const st_ps_data_request *r, const st_tensor **x, const st_tensor **y,
                           int64_t *n_train) {
  server_data *sd = user;
  if (sd->loaded) cli_free_data(&sd->d), sd->loaded = false;
  int rc = cli_load_data("server", r->spec, r->val_split, r->train_examples, (int)r->batch, r->seed, false, &sd->d);
  if (rc) return st_error(ST_ERR_INVALID, "--data %s: cannot load the training data", r->spec);
  sd->loaded = true;
  if (cli_match_model_input("server", &sd->d, r->input) != EXIT_OK)
    return st_error(ST_ERR_INVALID, "the data does not fit the model");
  *x = &sd->d.raw.train_x, *y = &sd->d.raw.train_y, *n_train = sd->d.n_train;
  return ST_OK;
}

int cmd_server(int argc, char **argv) {
  int rc = cli_parse("server", SERVER_USAGE, argc, argv, server_opts, NSERVER);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  server_cfg c = {NULL, NULL, NULL, false, 120};
  if (!cli_store("server", server_opts, NSERVER, &c)) return EXIT_USAGE;
  if (c.keys && c.insecure) { /* issue 29 D20: the contradiction is not resolved silently */
    fprintf(stderr, "strata server: --keys and --insecure contradict each other: give one\n");
    return EXIT_USAGE;
  }
  const char *keys = c.keys ? c.keys : getenv("STRATA_KEYS");
  bool insecure = c.insecure;
  double job_timeout = c.job_timeout;
  const char *file = c.cluster, *task = c.task, *role;
  int index; /* the task, checked here first: the CLI's messages and exit codes */
  if ((rc = ps_load_task("server", file, task, &role, &index))) return rc;
  if (!strcmp(role, "chief")) {
    fprintf(stderr, "strata server: task chief: the chief runs 'strata train --strategy "
            "parameter_server', not 'strata server'\n");
    return EXIT_USAGE;
  }
  if (insecure)
    fprintf(stderr, "strata server: warning: --insecure: no encryption or authentication; any "
            "process that reaches this port can change the model\n");
  server_data sd;
  memset(&sd, 0, sizeof sd);
  st_ps_server_options o = st_ps_server_default_options();
  o.cluster_file = file, o.task = task, o.keys_dir = keys, o.insecure = insecure, o.job_timeout = job_timeout;
  o.data = load_data, o.data_user = &sd;
  o.on_message = on_message, o.should_stop = should_stop;
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  st_status s = st_ps_server_run(&o);
  if (s == ST_ERR_PEER) rc = EXIT_PEER; /* its line went to on_message */
  else if (s != ST_OK) rc = cli_fail("server", s);
  if (sd.loaded) cli_free_data(&sd.d);
  return rc;
}
