/* Strata distribute layer: distribution strategies. A strategy decides where
 * variables live, how a global batch is split into per-replica slices and how
 * gradients become updates. Switching strategy is one line: pass another
 * strategy in st_model_options (NULL means the default one-device strategy). */
#ifndef STRATA_DISTRIBUTE_H
#define STRATA_DISTRIBUTE_H

#include "strata/data.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_strategy_kind {
  ST_STRATEGY_ONE_DEVICE = 0,
  ST_STRATEGY_MIRRORED,
  ST_STRATEGY_CENTRAL_STORAGE,
  ST_STRATEGY_MULTI_WORKER_MIRRORED,
  ST_STRATEGY_PARAMETER_SERVER,
  ST_STRATEGY_PIPELINE, /* model parallel: layer stages, micro-batches */
  ST_STRATEGY_COUNT
} st_strategy_kind;
const char *st_strategy_kind_name(st_strategy_kind k); /* "one_device", ... */
/* The kind a name gives; ST_ERR_INVALID naming it when unknown or NULL. */
st_status st_strategy_kind_parse(const char *name, st_strategy_kind *out);

/* TensorFlow's AutoShardPolicy. DATA: every worker runs the same pipeline and
 * keeps its contiguous share of each global batch (worker w of W: examples
 * [w*B/W, (w+1)*B/W), as replicas split a batch). OFF: each worker
 * trains on its own batches whole (the global batch is their union). FILE:
 * each worker reads its own files (give st_dataset_tfrecord num_shards =
 * worker count, shard_index = worker rank; fewer files than workers is an
 * error) and trains on its batches whole, as OFF. AUTO (as TensorFlow):
 * st_model_fit shards a pipeline reading TFRecord files by FILE itself
 * (rebuilt over worker r's files, file i when i % workers == r, each batch
 * size divided by the worker count, which must divide it: ST_ERR_INVALID
 * otherwise), and any other pipeline by DATA; with fewer files than
 * workers, or a stage that cannot be rebuilt (repeat, cache), it logs a
 * warning and shards by DATA. The CLI resolves AUTO to FILE for --data
 * tfrecord:... */
typedef enum st_auto_shard {
  ST_AUTO_SHARD_AUTO = 0,
  ST_AUTO_SHARD_DATA,
  ST_AUTO_SHARD_OFF,
  ST_AUTO_SHARD_FILE,
  ST_AUTO_SHARD_COUNT
} st_auto_shard;
st_status st_auto_shard_parse(const char *name, st_auto_shard *out); /* "auto", "data", ... */
#define ST_DEFAULT_COLLECTIVE_TIMEOUT 300.0

/* pipeline: the order in which a stage runs its micro-batches' passes.
 * GPIPE: every forward, then every backward. 1F1B: after stages-1-s warm-up
 * forwards, stage s alternates one forward and one backward, so at most
 * stages-s micro-batches are in flight on it (bounded activation memory).
 * Backward passes run in micro-batch order under both. */
typedef enum st_pipeline_schedule {
  ST_PIPELINE_GPIPE = 0,
  ST_PIPELINE_1F1B,
  ST_PIPELINE_SCHEDULE_COUNT
} st_pipeline_schedule;
/* "gpipe" or "1f1b"; ST_ERR_INVALID naming the value otherwise. */
st_status st_pipeline_schedule_parse(const char *name, st_pipeline_schedule *out);

/* Limits, checked by st_strategy_create (more is ST_ERR_INVALID naming the
 * option, the count given and the limit). ST_MAX_REPLICAS: local replicas of
 * one process (`devices` entries or `replicas`; one replica per core is capped
 * there; one_device's compute threads too). ST_MAX_WORKERS: processes of a
 * multi_worker_mirrored job (the MPI world size). ST_MAX_PS_TASKS: tasks of
 * one role (workers, ps) in a parameter-server cluster (strata/ps.h; checked
 * when the cluster is read). Per-replica, per-worker and per-task tables
 * inside Strata are sized by them. */
#define ST_MAX_REPLICAS 64
#define ST_MAX_WORKERS 64
#define ST_MAX_PS_TASKS 256

typedef struct st_strategy_options {
  st_strategy_kind kind;
  const char *device;   /* one_device: "cpu:0" (default) */
  /* mirrored / central_storage: the devices, e.g. "cpu:0,cpu:1" (one replica
   * each); NULL = `replicas` replicas; both unset = one replica per CPU core
   * (every GPU, once a GPU backend exists). */
  const char *devices;
  int replicas;
  int threads;          /* one_device: compute threads; a single (local)
                           replica of the other strategies: its BLAS threads;
                           0 = one per core (multi_worker_mirrored: the cores
                           shared by the workers on the machine) */
  /* mirrored: how gradients are all-reduced: "all_reduce" (default; chunked
   * reduce-scatter + all-gather) or "reduction_to_one_device". */
  const char *cross_device_ops;
  /* mirrored: gradients are all-reduced in packs of about this many bytes
   * (whole layers; 0 = one pack), each started as soon as backward has
   * produced it, overlapping the rest of backward unless no_overlap. */
  size_t bytes_per_pack; /* default 4 MiB */
  bool no_overlap;
  /* multi_worker_mirrored (launched with mpirun / srun; one worker per
   * process, `devices`/`replicas` are each worker's local replicas, default
   * one): how the input is split between workers, and how long a collective
   * waits for a peer before failing with ST_ERR_TIMEOUT (seconds; 0 =
   * ST_DEFAULT_COLLECTIVE_TIMEOUT). */
  st_auto_shard auto_shard;
  double collective_timeout;
  /* pipeline: the model's layers in contiguous stages, one per `devices`
   * entry (or pipeline_stages of them on the CPU); stage_boundaries, e.g.
   * "3,5", gives the layer indices where stages 1.. start (default: balanced
   * by estimated cost, FLOPs + parameter bytes); each global batch runs as
   * micro_batches slices (0 = one per stage) in pipeline_schedule order;
   * their gradients are summed in slice order and applied once. Started by
   * an MPI launcher with more than one process (mpirun, srun), each process
   * runs one stage instead: rank r runs stage r / D as data-parallel replica
   * r % D, D = processes / stages (pipeline_stages 0: one per process);
   * collective_timeout applies to its messages. */
  int pipeline_stages;
  const char *stage_boundaries;
  int micro_batches;
  st_pipeline_schedule pipeline_schedule;
  /* mirrored / multi_worker_mirrored: ZeRO stage 1. Each of the N replicas
   * (every worker's together) keeps the optimizer slots of its own
   * contiguous shard of the flat parameter buffer only (about 1/N of them):
   * gradients are reduce-scattered, each replica updates its shard, the
   * updated weights are all-gathered. The weights are the same bytes as
   * without it (the same sums in the same order, the same per-element
   * update); checkpoints keep their format (slots gathered for the chief).
   * Gradients are reduced after backward (no overlap, packs ignored); the
   * custom training loop (st_replica_apply_gradients) refuses it. */
  bool shard_optimizer;
  /* Logical GPUs per physical GPU (TensorFlow's set_logical_device_
   * configuration): `devices` gpu:0 .. gpu:(GPUs * logical_gpus - 1) then
   * name them. 0 = unset; >= 1 needs a GPU (ST_ERR_NOT_BUILT or
   * ST_ERR_INVALID saying what is missing otherwise). */
  int logical_gpus;
  /* GPU matrix products (tf.config.experimental.enable_tensor_float_32_
   * execution): false = fp32 as the CPU (default), true = TF32 tensor cores
   * (10-bit mantissa inputs, fp32 sums; weights then differ from the CPU's
   * beyond rounding). Applies to the whole process from this strategy's
   * creation on; ignored without GPUs. */
  bool tf32;
} st_strategy_options;
/* The defaults noted above for a strategy of that kind. */
st_strategy_options st_strategy_default_options(st_strategy_kind kind);

typedef struct st_strategy st_strategy;
/* A strategy from o (not retained: its strings may go after the call) into
 * *out (NULL on failure). ST_ERR_INVALID names a bad option; ST_ERR_NOT_BUILT
 * names the strategy when it is not available in this build. A strategy
 * serves one compiled model at a time (compile refuses a second). */
st_status st_strategy_create(const st_strategy_options *o, st_strategy **out);
/* Accepts NULL. Destroying a strategy that models were created with does not
 * pull it from under them: it stays allocated until the last of those models
 * is destroyed, and those models refuse every verb (compile, fit, evaluate,
 * predict, weights) with "its strategy was destroyed"; only st_model_destroy
 * is left to call. A second destroy of the same strategy is ignored while it
 * is kept alive that way. */
void st_strategy_destroy(st_strategy *s);
/* The strategy's kind (ST_STRATEGY_ONE_DEVICE for NULL). */
st_strategy_kind st_strategy_kind_of(const st_strategy *s);
/* Replicas of every worker together (global batch / per-replica batch). */
int st_strategy_num_replicas_in_sync(const st_strategy *s);
/* Multi-worker: this process's rank and the number of workers; the chief
 * (rank 0) alone writes checkpoints, backups and logs. 0 / 1 / true for the
 * single-process strategies. */
int st_strategy_worker_rank(const st_strategy *s);
int st_strategy_worker_count(const st_strategy *s);
bool st_strategy_is_chief(const st_strategy *s);

/* pipeline: one stage's figures, summed over the training steps so far. */
typedef struct st_pipeline_stage_stats {
  int first_layer, end_layer; /* layers [first_layer, end_layer) */
  int64_t params;             /* trainable + non-trainable floats it holds */
  size_t peak_bytes;          /* its buffers: variables, optimizer slots,
                                 gradients, activations of the micro-batches
                                 in flight, scratch */
  double busy_seconds;        /* in its forward, backward and update passes */
  double step_seconds;        /* wall time of the training steps */
  double bubble_fraction;     /* 1 - busy / step (0 before any step) */
  size_t peak_rss_bytes;      /* across processes: peak resident memory of the
                                 stage's (first replica's) process; 0 in one */
  double schedule_bubble;     /* the last step's executed pass order replayed
                                 with one time unit per pass: idle fraction,
                                 (S-1)/(M+S-1) for GPipe and 1F1B (-1: none) */
  int max_in_flight;          /* the most micro-batches it held at once in
                                 that order: M (GPipe), at most S-stage (1F1B) */
} st_pipeline_stage_stats;
/* Stages of a pipeline strategy bound to a compiled model (0 otherwise). */
int st_strategy_pipeline_stages(const st_strategy *s);
/* Stage i's figures; ST_ERR_INVALID for a NULL argument, a strategy that is
 * not an attached pipeline, or i out of range. */
st_status st_strategy_pipeline_stage_stats(const st_strategy *s, int i,
                                           st_pipeline_stage_stats *out);

/* ---- custom training loops ------------------------------------------------
 * st_strategy_run calls fn once per replica, in parallel, each with its replica
 * context (TensorFlow's strategy.run and the replica context). Inside, a step
 * usually takes the replica's slice of a global batch, computes gradients and
 * applies them; st_replica_all_reduce reduces any other values across the
 * replicas. The strategy must be bound to a compiled model. One-device runs fn
 * once. Every replica must make the same calls in the same order.
 * multi_worker_mirrored (processes launched by mpirun): every worker calls
 * st_strategy_run the same number of times; fn runs on its local replicas,
 * st_replica_slice gives each its share of the worker's share of the global
 * batch (as fit splits it), and st_replica_apply_gradients and
 * st_replica_all_reduce span every replica of every worker (fit's update
 * bytes). A worker that fails or destroys its model makes its peers' run
 * fail with ST_ERR_PEER naming its rank; one that stalls, with
 * ST_ERR_TIMEOUT after the collective timeout. */
typedef enum st_reduce_op { ST_REDUCE_SUM = 0, ST_REDUCE_MEAN, ST_REDUCE_COUNT } st_reduce_op;
typedef struct st_replica_context st_replica_context;
typedef st_status (*st_replica_fn)(st_replica_context *ctx, void *arg);
/* Runs fn(ctx, arg) on every replica (arg is borrowed, shared by all) and
 * returns the failure of the replica that failed first (a status fn
 * returned, with its message). A replica that fails or returns while others
 * wait for it in a collective (st_replica_all_reduce, the all-reduce inside
 * st_replica_apply_gradients) does not hang them: they wake within
 * milliseconds with ST_ERR_PEER, and when the one that left had returned
 * ST_OK the run fails with ST_ERR_INVALID "replica R returned while replica
 * W still waited in a collective". The strategy can run again afterwards.
 * ST_ERR_INVALID when s or fn is NULL, s is not bound to a compiled model or
 * was destroyed. Counts one step when replica 0 applied gradients.
 * Re-entrancy: from inside one of s's step functions, st_strategy_run,
 * st_model_fit, st_model_evaluate, st_model_predict, st_checkpoint_save /
 * restore and st_model_save / load / set_weights on s's model are refused,
 * every time, on every replica: ST_ERR_INVALID "<function>: cannot be called
 * from inside st_strategy_run's step function". While st_model_fit runs on s
 * (its callbacks, map functions of its data), st_strategy_run and a nested
 * st_model_fit are refused ("cannot be called from inside st_model_fit");
 * evaluate, predict, checkpoints and weights are allowed there, as Keras
 * callbacks use them. */
st_status st_strategy_run(st_strategy *s, st_replica_fn fn, void *arg);
/* out[n] = reduction over replicas of per_replica[r*n .. r*n+n), in replica
 * order (for values collected per replica inside st_strategy_run).
 * multi_worker_mirrored with several workers: a collective (every worker
 * calls it with the same n) over every replica of every worker, added
 * worker-major in replica order, so every worker gets the same bits; MEAN
 * divides by all replicas. ST_ERR_INVALID for a NULL s, an unknown op, NULL
 * buffers with n > 0, a worker with another n, or (across workers) s not
 * bound to a compiled model. */
st_status st_strategy_reduce(const st_strategy *s, st_reduce_op op, const float *per_replica,
                             size_t n, float *out);
/* The same over a tensor each replica kept in its own buffer:
 * out[j] = per_replica[0][j] + per_replica[1][j] + ... (in replica order;
 * MEAN then divides by the replica count), for j < n. per_replica holds one
 * pointer per replica of this process (st_strategy_num_replicas_in_sync for
 * a single-process strategy), as st_strategy_reduce; out may be one of them;
 * across workers as st_strategy_reduce. ST_ERR_INVALID for a NULL s, an unknown op, or (n >
 * 0) a NULL per_replica, out or per_replica[i]. */
st_status st_strategy_reduce_tensor(const st_strategy *s, st_reduce_op op,
                                    const float *const *per_replica, size_t n, float *out);

/* This replica's id (0-based) and the replicas of the run (0 for NULL):
 * this process's (local) replicas under multi_worker_mirrored. */
int st_replica_id(const st_replica_context *c);
int st_replica_count(const st_replica_context *c);
/* This replica's contiguous share of a global batch (as fit splits it:
 * under multi_worker_mirrored with auto-shard DATA, of this worker's share);
 * an empty batch for NULL arguments. The batch points into global's data. */
st_batch st_replica_slice(const st_replica_context *c, const st_batch *global);
/* Forward and backward on this replica's examples with the loss summed over
 * them and divided by global_batch; gradients stay in the replica. Writes the
 * sum of the per-example losses and the metric's correct count (loss_sum and
 * correct may be NULL). ST_ERR_INVALID (naming the replica) for a NULL c or
 * local, NULL data with examples, global_batch below local->size, or (sparse
 * losses) a label that is not a class index of the model, as fit checks. */
st_status st_replica_compute_gradients(st_replica_context *c, const st_batch *local,
                                       int64_t global_batch, double *loss_sum,
                                       int64_t *correct);
/* Sum the replicas' gradients and apply the optimizer (to each replica's copy
 * for mirrored; once, to the shared variables, otherwise). Counts one step.
 * Every replica must call it (or none): ST_ERR_PEER when another replica
 * left the run instead. */
st_status st_replica_apply_gradients(st_replica_context *c);
/* In-place all-reduce of n floats across the replicas (buf may be NULL only
 * when n is 0); ST_ERR_PEER when another replica left the run. */
st_status st_replica_all_reduce(st_replica_context *c, st_reduce_op op, float *buf, size_t n);

/* The model as a differentiable function (what TensorFlow's GradientTape
 * gives a custom loop): st_replica_forward runs the model on local->x (n =
 * local->size examples; training: dropout and batch statistics as in fit)
 * and points *out at its outputs [n, outputs] (host memory for host
 * backends; valid until the replica's next forward); st_replica_backward
 * takes the gradient of the caller's loss with respect to those outputs, dy
 * [n, outputs] (host memory; scale it as the loss is, e.g. by 1/global
 * batch), and writes every trainable variable's gradient into the replica
 * (as st_replica_compute_gradients does: st_replica_apply_gradients then
 * sums and applies them) and, when dx is not NULL, the gradient with
 * respect to the input [n, input] (a model of one input, host backends; dx
 * may be NULL).
 * st_replica_loss_gradient is fit's own loss on the last forward: dy [n,
 * outputs] = d(sum of the per-example losses against the labels y) / d out,
 * divided by global_batch, and the unscaled loss sum (loss_sum may be NULL); with it
 * a custom loop trains fit's bytes. Every replica calls them in the same
 * order (a model with synchronized BatchNormalization exchanges statistics);
 * ST_ERR_INVALID naming the argument otherwise (NULL c, local or dy with
 * examples; backward before forward; a label out of range). A one-device
 * strategy whose fit splits batches over CPU threads runs these (and
 * st_replica_compute_gradients) over the same per-thread slices: fit's
 * Dropout masks and gradient bytes. */
st_status st_replica_forward(st_replica_context *c, const st_batch *local, bool training,
                             const float **out);
st_status st_replica_loss_gradient(st_replica_context *c, const float *y, int64_t global_batch,
                                   float *dy, double *loss_sum);
st_status st_replica_backward(st_replica_context *c, const float *dy, float *dx);
/* This replica's gradients of the trainable variables (what
 * st_replica_backward or st_replica_compute_gradients left there, before
 * st_replica_apply_gradients sums them): st_replica_gradients copies the n
 * floats (n = the model's trainable parameter count, in the order of its
 * weights file) into out; st_replica_set_gradients replaces them by g (a
 * custom loop's changed gradients, e.g. clipped: give the total on one
 * replica and zeros on the others, as apply sums the replicas). Host
 * memory. ST_ERR_INVALID for a NULL c, out or g (n > 0), or n not the
 * trainable parameter count. */
st_status st_replica_gradients(st_replica_context *c, float *out, size_t n);
st_status st_replica_set_gradients(st_replica_context *c, const float *g, size_t n);

#ifdef __cplusplus
}
#endif
#endif
