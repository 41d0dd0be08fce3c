/* The parameter-server commands of the strata CLI (issue 13):
 *   strata server                     a worker or ps task (ps_server.c)
 *   strata train --strategy parameter_server   the chief (ps_coord.c)
 *   strata launch --workers N --ps M -- train ...   a whole cluster on
 *                                     loopback (ps_launch.c)
 *   strata keygen DIR                 CURVE keys for a cluster (ps_launch.c)
 * and what they share (ps_job.c): the job the chief sends every server, the
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

#include "cli.h"
#include "distribute/ps/cluster.h"
#include "distribute/ps/transport.h"
#include "model/model.h"

/* What every process of a job must agree on (sent in JOB as key=value lines). */
typedef struct ps_job {
  uint64_t job_id;
  char model[1024], data[1024];
  int64_t seed, batch, train_examples, total_steps, steps_per_execution;
  double val_split, heartbeat_interval, coordinator_timeout;
  int64_t max_staleness; /* -1: unbounded (TF's behaviour) */
  int64_t ps_shards;     /* > 0: every variable in this many shards (FixedShardsPartitioner) */
  int64_t ps_min_shard_bytes; /* > 0: shards of at least this size, at most one per ps
                                 (MinSizePartitioner) */
  st_optimizer_options opt;
} ps_job;

/* One variable (a trainable layer parameter), or one shard of it (a
 * contiguous range of rows along axis 0), and the ps that owns it. */
typedef struct ps_var {
  size_t offset, size; /* floats in st_net.params */
  int ps;              /* round-robin over the ps tasks */
} ps_var;

typedef struct ps_layout {
  int nvars, nps;
  ps_var *vars;        /* owned [nvars] */
  size_t *ps_floats;   /* owned [nps]: floats each ps holds */
} ps_layout;

/* Encode as text (malloc'd) / decode (ST_ERR_FORMAT naming the line). */
char *ps_job_encode(const ps_job *j);
st_status ps_job_decode(const char *text, size_t len, ps_job *j);
/* The job's model, compiled for one device (one thread), weights from its seed. */
st_status ps_build_model(const ps_job *j, st_strategy **strategy, st_model **model);
/* Variables in layer order, split into shards as the job asks, placed
 * round-robin over the nps ps tasks (shards of one variable on consecutive
 * ps). */
st_status ps_layout_make(const st_net *net, int nps, const ps_job *j, ps_layout *out);
void ps_layout_free(ps_layout *l);
/* Copy the ps's variables between the net's flat buffer and a packed buffer. */
void ps_pack(const ps_layout *l, int ps, const float *params, float *packed);
void ps_unpack(const ps_layout *l, int ps, const float *packed, float *params);
/* A random non-zero 64-bit value (job ids, incarnations). */
uint64_t ps_random_u64(void);
/* The cluster of this process: --cluster FILE with --task, or TF_CONFIG.
 * Prints the error and returns EXIT_USAGE on failure. */
int ps_load_cluster(const char *cmd, const char *cluster_file, const char *task, st_ps_cluster *c);
/* A header from this task. */
st_ps_header ps_header(const st_ps_cluster *c, uint64_t job_id, uint32_t incarnation, int type);

/* Closure ids: the generation (bumped by every rollback to a backup) in the
 * top 16 bits, then epoch * 1000000007 + the closure's index in the epoch. */
#define PS_GENERATION_SHIFT 48
static inline uint64_t ps_closure_generation(uint64_t closure) { return closure >> PS_GENERATION_SHIFT; }

/* "short frame 2, bad magic 1" for the non-zero drop counters of c into
 * buf; returns the frames dropped in all. */
int64_t ps_drops_text(st_ps_counters c, char *buf, size_t n);

/* Little-endian helpers for payloads. */
void ps_put_u64(uint8_t *p, uint64_t v);
uint64_t ps_get_u64(const uint8_t *p);

int cmd_server(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_keygen(int argc, char **argv);

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
