/* The parameter-server commands of the strata CLI (issue 13):
 *   strata server                     a worker or ps task (ps_server.c)
 *   strata train --strategy parameter_server   the chief (ps_coord.c)
 *   strata launch --workers N --ps M -- train ...   a whole cluster on
 *                                     loopback (ps_launch.c)
 *   strata keygen DIR                 CURVE keys for a cluster (ps_launch.c)
 *   strata launch --workers N -- train ... --strategy multi_worker_mirrored
 *                                     N TF_CONFIG workers (launch_mw.c)
 * and what they share (st__ps_job.c): the job the chief sends every server, the
 * model built from it, and the placement of variables on the ps tasks.
 *
 * Protocol (frame.h types): the chief sends JOB to every server and waits for
 * JOB_OK; then RUN closures to free workers (each a list of steps, each step
 * a global step number and the indices of its batch); a worker pulls every
 * ps's variables (PULL/PULL_OK), computes the gradients of the batch and
 * pushes each ps its part (PUSH, answered by ACK once applied or found to be a
 * duplicate), then answers DONE. Each ps applies a global step at most once (a
 * bitmap of applied steps): a closure re-run after its worker was lost skips
 * the steps already applied there. Workers send HEARTBEAT to the chief every
 * interval; the chief sends HEARTBEAT to every server; a worker silent for 3
 * intervals is lost and its closure goes to another; a server that hears
 * nothing from the chief for --coordinator-timeout exits 3. At the end the
 * chief asks each ps for STATS, pulls the variables, evaluates, saves and
 * sends STOP. */
#ifndef STRATA_TOOLS_PS_H
#define STRATA_TOOLS_PS_H

#include <sys/types.h>

#include "cli.h"

/* The task of this process in its cluster (--cluster FILE with --task, or
 * TF_CONFIG): *role "chief", "worker" or "ps", and *index. Prints the error
 * and returns EXIT_USAGE (EXIT_FAIL when out of memory) on failure
 * (ps_launch.c, the one CLI file that reads clusters). */
int ps_load_task(const char *cmd, const char *cluster_file, const char *task, const char **role,
                 int *index);

/* A free TCP port on 127.0.0.1 for a task launch starts (ps_launch.c), or -1. */
int launch_free_port(st_rng *r);
/* fork + exec this binary with argv and TF_CONFIG = tf_config: the child's
 * pid, or -1 (ps_launch.c). */
pid_t launch_spawn(const char *tf_config, char **argv);
/* strata launch with `--strategy multi_worker_mirrored` after `--` (its
 * options already parsed: workers, whether --ps was given): launch_mw.c. */
int launch_multi_worker(int argc, char **argv, int dd, long workers, bool ps_given);

int cmd_server(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
/* The library's PS test hooks from the STRATA_PS_TEST_* variables (ps_test_hooks.c). */
void ps_test_hooks_from_env(void);

/* The chief's run: what `strata train --strategy parameter_server` was given. */
typedef struct ps_train_args {
  const char *model, *data, *save, *report;
  long epochs, batch, seed, train_examples;
  double val_split, lr;
  st_optimizer_options opt;
  bool quiet;
  const char *cluster_file, *task, *keys;
  bool insecure;
  long steps_per_execution;
  double heartbeat_interval, coordinator_timeout;
  long max_staleness; /* -1 unbounded */
  long ps_shards, ps_min_shard_bytes; /* 0: none */
  const char *backup_dir;  /* BackupAndRestore (NULL: none) */
  long backup_every;       /* with backup_dir: also every N steps (at a closure boundary) */
  bool resume_anyway;
  const st_callback *callbacks; /* epoch-level hooks (on_epoch_begin / on_epoch_end), run by the chief */
  int ncallbacks;
  const char *plot;        /* --plot FILE (NULL: none) */
} ps_train_args;
int ps_train(const ps_train_args *a);

#endif
