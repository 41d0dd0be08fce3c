/* Internal: what the tasks of a parameter-server job share: the job the
 * chief sends every server (JOB, key=value lines), the placement of
 * variables on the ps tasks, headers and payload helpers. The protocol is in
 * docs/PARAMETER_SERVER.md. The model built from a job comes from the caller
 * (st__ps_model below: train/ps_model.c builds it, since it may read a Keras
 * JSON file, src/io). Pure functions: any thread. */
#ifndef STRATA_PS_JOB_H
#define STRATA_PS_JOB_H

#include <stdint.h>

#include "ps/cluster.h"
#include "ps/transport.h"
#include "nn/net.h"

/* What every process of a job must agree on (sent in JOB as key=value lines). */
typedef struct st__ps_job {
  uint64_t job_id;
  char model[1024], data[1024];
  int64_t seed, batch, train_examples, total_steps, steps_per_execution;
  double val_split, heartbeat_interval, coordinator_timeout;
  int64_t max_staleness; /* -1: unbounded (TF's behaviour) */
  int64_t ps_shards;     /* > 0: every variable in this many shards (FixedShardsPartitioner) */
  int64_t ps_min_shard_bytes; /* > 0: shards of at least this size, at most one per ps
                                 (MinSizePartitioner) */
  st_optimizer_options opt;
} st__ps_job;

/* One variable (a trainable layer parameter), or one shard of it (a
 * contiguous range of rows along axis 0), and the ps that owns it. */
typedef struct st__ps_var {
  size_t offset, size; /* floats in st_net.params */
  int ps;              /* round-robin over the ps tasks */
} st__ps_var;

typedef struct st__ps_layout {
  int nvars, nps;
  st__ps_var *vars;        /* owned [nvars] */
  size_t *ps_floats;   /* owned [nps]: floats each ps holds */
  size_t n_state;      /* the net's non-trainable floats (BatchNormalization's
                          moving statistics): all on ps 0 */
} st__ps_layout;

/* Floats of ps p's PULL_OK and PUSH payloads: its variables (gradients),
 * then on ps 0 the state (in a PUSH: the step's change of the state, which
 * the ps adds once, with the step's gradients). SNAPSHOT / RESTORE carry the
 * variables, each optimizer slot, then that state. */
static inline size_t st__ps_wire_floats(const st__ps_layout *l, int p) {
  return l->ps_floats[p] + (p == 0 ? l->n_state : 0);
}

/* The bounds of a job's fields (the command line's): a JOB outside them is
 * refused before anything is sized from it (issue 29 D2). */
enum { ST_PS_MAX_BATCH = 1 << 20 };
#define ST_PS_MAX_STEPS (1LL << 32)
/* ST_ERR_INVALID naming the field, its value and bounds (what: the prefix,
 * "JOB" or the caller's options), or the timeouts that contradict each
 * other (coordinator_timeout < 2 x heartbeat_interval). */
st_status st__ps_job_check(const st__ps_job *j, const char *what);
/* Encode as text (malloc'd) / decode (ST_ERR_FORMAT naming the line or the
 * field out of bounds). */
char *st__ps_job_encode(const st__ps_job *j);
st_status st__ps_job_decode(const char *text, size_t len, st__ps_job *j);
/* The job's model, compiled for one device (one thread), weights from its
 * seed: its net, and what to call to free it. Built by the caller's
 * st__ps_build_fn (train/ps_model.c). */
typedef struct st__ps_model {
  st_net *net;                 /* borrowed from owner */
  void *owner;
  void (*destroy)(void *owner);
} st__ps_model;
typedef st_status (*st__ps_build_fn)(const st__ps_job *j, st__ps_model *out);
static inline void st__ps_model_free(st__ps_model *m) {
  if (m->destroy) m->destroy(m->owner);
  m->net = NULL, m->owner = NULL, m->destroy = NULL;
}
/* Variables in layer order, split into shards as the job asks, placed
 * round-robin over the nps ps tasks (shards of one variable on consecutive
 * ps). */
st_status st__ps_layout_make(const st_net *net, int nps, const st__ps_job *j, st__ps_layout *out);
void st__ps_layout_free(st__ps_layout *l);
/* Copy the ps's variables between the net's flat buffer and a packed buffer. */
void st__ps_pack(const st__ps_layout *l, int ps, const float *params, float *packed);
void st__ps_unpack(const st__ps_layout *l, int ps, const float *packed, float *params);
/* A random non-zero 64-bit value (job ids, incarnations). */
uint64_t st__ps_random_u64(void);
/* A header from this task. */
st_ps_header st__ps_make_header(const st_ps_cluster *c, uint64_t job_id, uint32_t incarnation, int type);

/* Closure ids: the generation (bumped by every rollback to a backup) in the
 * top 16 bits, then epoch * 1000000007 + the closure's index in the epoch. */
#define ST__PS_GENERATION_SHIFT 48
static inline uint64_t st__ps_closure_generation(uint64_t closure) { return closure >> ST__PS_GENERATION_SHIFT; }

/* "short frame 2, bad magic 1" for the non-zero drop counters of c into
 * buf; returns the frames dropped in all. */
int64_t st__ps_drops_text(st_ps_counters c, char *buf, size_t n);

/* Little-endian helpers for payloads. */
void st__ps_put_u64(uint8_t *p, uint64_t v);
uint64_t st__ps_get_u64(const uint8_t *p);

#endif
