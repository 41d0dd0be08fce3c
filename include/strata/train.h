/* Strata train layer: the Sequential model and its Keras-style verbs — compile,
 * fit, evaluate, predict, summary, save/load weights — and callbacks. A model is
 * bound to a strategy when it is created (the C analogue of strategy.scope()). */
#ifndef STRATA_TRAIN_H
#define STRATA_TRAIN_H

#include <stdio.h>

#include "strata/data.h"
#include "strata/distribute.h"
#include "strata/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_model st_model;

typedef struct st_model_options {
  st_shape input_shape;   /* per example, e.g. st_shape3(28,28,1) */
  const char *name;       /* "sequential" */
  uint64_t seed;          /* weights init, dropout, ... (default 0) */
  st_strategy *strategy;  /* borrowed; NULL = one-device default */
  bool sync_batchnorm;    /* built-in models: BatchNormalization(synchronized=True),
                             batch statistics over all replicas (default false:
                             per replica, as Keras) */
} st_model_options;
/* Options with that input shape, name "sequential", seed 0, no strategy. */
st_model_options st_model_default_options(st_shape input_shape);

/* An empty Sequential model into *out (NULL on failure). o and out may not
 * be NULL (ST_ERR_INVALID naming them); o->strategy (may be NULL) is
 * borrowed: a strategy destroyed before the model stays alive until the
 * model goes (see st_strategy_destroy); ST_ERR_INVALID when it was already
 * destroyed. */
st_status st_sequential_create(const st_model_options *o, st_model **out);
void st_model_destroy(st_model *m); /* accepts NULL; destroys its layers */
/* The seed of m's initial weights (default: o->seed, which keys dropout
 * too): TensorFlow's next seed for a second model of one program, its
 * dropout masks still keyed by o->seed. Before the first st_model_compile
 * (ST_ERR_INVALID after it, or for a NULL m). */
st_status st_model_set_init_seed(st_model *m, uint64_t seed);
/* Takes ownership of layer (destroyed on failure too, and when m is NULL);
 * builds it against the previous output shape; errors name the layer and
 * shapes. A layer already in a model is refused (ST_ERR_INVALID) and left to
 * that model. A failed add (a NULL layer, i.e. a constructor that failed,
 * included) is recorded: st_model_compile then refuses the model with "layer
 * N (Class) was not added: <why>", so checking only the last add is safe. */
st_status st_model_add(st_model *m, st_layer *layer);
/* A model of the graph from inputs[0..n_in) to outputs[0..n_out) (Keras's
 * Model(inputs, outputs)); o may be NULL (name "functional", seed 0, no
 * strategy; o->input_shape is not used: the inputs give the shapes). On
 * success the model owns every layer between them and the input nodes;
 * on failure nothing is taken. With several inputs an example's row holds
 * input 0's values, then input 1's, ... (a dataset's features are that
 * row). With several outputs the model's output row is their
 * concatenation (output 0's values, then output 1's, ...: what predict
 * returns) and a label row the concatenation of each output's label (one
 * class index for a sparse loss, the output's size otherwise), each output
 * with its own loss and weight (st_compile_options.losses); they train
 * under one_device, mirrored and central_storage on the cpu backend, not
 * with class_weight or sample_weight. ST_ERR_INVALID naming the tensor
 * when an output depends on an input not in inputs, an input is not an
 * st_input node, a layer belongs to another model, an output is given
 * twice, or a count is out of range (1..8 inputs, 1..8 outputs). */
st_status st_functional_create(st_node *const *inputs, int n_in, st_node *const *outputs,
                               int n_out, const st_model_options *o, st_model **out);
/* True for a model made by st_functional_create (false for Sequential or NULL). */
bool st_model_is_functional(const st_model *m);
/* Layers, the i-th layer (NULL out of range), parameter count, output and
 * input shape (per example); 0, NULL or an empty shape for a NULL m. */
int st_model_layer_count(const st_model *m);
const st_layer *st_model_layer(const st_model *m, int i);
size_t st_model_param_count(const st_model *m, bool trainable_only);
st_shape st_model_output_shape(const st_model *m);
st_shape st_model_input_shape(const st_model *m);

/* Outputs of one model at most (st_functional_create's n_out). */
#define ST_MAX_OUTPUTS 8

typedef struct st_compile_options {
  st_optimizer_options optimizer;
  st_loss_kind loss;
  int nmetrics;
  st_metric_kind metrics[4];
  /* Several outputs (Keras's loss=[...], loss_weights=[...]): nlosses 0 =
   * `loss` for every output, else one per output (nlosses = the model's
   * outputs); nloss_weights 0 = weight 1 each, else one per output. The
   * loss fit minimises and reports is sum_j loss_weights[j] * loss_j; the
   * metrics apply to every output. With one output, nlosses may be 0 or 1
   * (losses[0] then replaces `loss`) and nloss_weights must be 0. */
  int nlosses;
  st_loss_kind losses[ST_MAX_OUTPUTS];
  int nloss_weights;
  float loss_weights[ST_MAX_OUTPUTS];
} st_compile_options;
/* Adam defaults, metric accuracy, loss ST_LOSS_SPARSE_CE: sparse CE on
 * probabilities, as Keras's string losses (from_logits=False), for a model
 * ending in softmax; a model ending in a linear Dense sets
 * ST_LOSS_SPARSE_CE_LOGITS. */
st_compile_options st_compile_default_options(void);
/* Allocates variables, initialises them (seeded) and binds the strategy.
 * ST_ERR_INVALID (naming the function and the field) for a NULL m or o, an
 * option out of range, a model without layers or with a failed st_model_add,
 * a destroyed strategy or one bound to another model. A second compile (as
 * Keras's, e.g. to fine-tune with another optimizer or learning rate)
 * replaces the optimizer (fresh state, iteration count 0: schedules and
 * Adam's bias correction restart), loss and metrics, and keeps the weights
 * and BatchNorm statistics; the next fit starts at epoch 0. A recompile that
 * fails (ST_ERR_NOMEM) leaves the model uncompiled.
 * Logs one warning (st_log) when the output activation and the loss disagree:
 * softmax under a from-logits loss (softmax applied twice), or a linear output
 * under a probability loss. */
st_status st_model_compile(st_model *m, const st_compile_options *o);

/* Keras-like summary table: *out receives a malloc'd string (caller frees it
 * with free()); NULL on failure (ST_ERR_NOMEM; ST_ERR_INVALID for a NULL m
 * or out). The model need not be compiled. */
st_status st_model_summary(const st_model *m, char **out);

/* ---- logs and callbacks ---- */
typedef struct st_epoch_logs {
  int epoch;          /* 0-based */
  double loss, accuracy;
  bool has_validation;
  double val_loss, val_accuracy;
  double lr;
  double seconds;
  int64_t steps;
  int64_t examples;   /* training examples in the epoch */
  /* Several outputs (0 otherwise): output j's mean loss (unweighted) and
   * metric over the epoch, and on the validation data (Keras's
   * "<output layer>_loss", "<output layer>_accuracy" and their val_ forms;
   * loss is their weighted sum). Not kept in checkpoints: an epoch resumed
   * from a backup counts the steps run since, earlier epochs' logs read 0. */
  int noutputs;
  double output_loss[ST_MAX_OUTPUTS], output_accuracy[ST_MAX_OUTPUTS];
  double val_output_loss[ST_MAX_OUTPUTS], val_output_accuracy[ST_MAX_OUTPUTS];
} st_epoch_logs;
typedef struct st_batch_logs {
  int epoch;
  int64_t step;        /* step within the epoch, 0-based */
  int64_t steps;       /* steps per epoch; -1 unknown */
  double loss, accuracy; /* running means over the epoch so far */
  double step_loss;      /* this step's own loss: the mean over its batch's
                            examples (not the running mean; also right on the
                            first step after a resume from a backup) */
} st_batch_logs;

/* A callback owns its state `user`: destroy(user) frees it (NULL when there
 * is nothing to free, e.g. a callback whose user is borrowed). Every callback,
 * made by the library or by hand, is freed with st_callback_destroy. */
typedef struct st_callback {
  void *user;
  /* Each hook may be NULL. Returning non-OK stops fit with that status. */
  st_status (*on_epoch_begin)(void *user, st_model *m, int epoch);
  st_status (*on_batch_end)(void *user, st_model *m, const st_batch_logs *l);
  st_status (*on_epoch_end)(void *user, st_model *m, const st_epoch_logs *l);
  void (*destroy)(void *user);
} st_callback;
/* Calls cb->destroy(cb->user) when set, then zeroes *cb. Accepts NULL and a
 * zeroed callback; destroying twice is harmless. */
void st_callback_destroy(st_callback *cb);

typedef struct st_history {
  int epochs;
  st_epoch_logs *logs; /* [epochs], malloc'd; st_history_destroy */
  double samples_per_sec; /* training only, first `warmup_steps` excluded */
  int64_t train_samples;
  double train_seconds;
} st_history;
void st_history_destroy(st_history *h); /* frees logs, zeroes h; accepts NULL */

typedef struct st_fit_options {
  int epochs;                  /* 1 */
  st_dataset *validation;      /* borrowed; NULL = none */
  const st_callback *callbacks;/* borrowed array */
  int ncallbacks;
  int warmup_steps;            /* excluded from samples_per_sec (20) */
  /* BackupAndRestore: if backup_dir holds a checkpoint, fit resumes from it
   * (same epoch, same step, same data position) and finishes with the weights
   * an uninterrupted run gives; it saves a checkpoint there at each epoch end
   * and every backup_every_steps steps (0 = epochs only), and deletes the
   * backup when training completes. */
  const char *backup_dir;
  int64_t backup_every_steps;
  /* Resume identity: a backup records the run that wrote it — the model's
   * structure (layer classes, names, shapes; a CRC32C), optimizer, learning
   * rate schedule as compiled, seed, global batch size and data_fingerprint —
   * and fit refuses to resume one written by a run that differs, before any
   * step (ST_ERR_INVALID: "<backup_dir> was written by a run with <field>
   * <value>, this run has <value> ..."), unless resume_anyway: then it logs a
   * warning per field and resumes with this run's values (this run's
   * learning rate, not the backup's; a model whose variables do not fit the
   * backup still fails). data_fingerprint: any text that identifies the
   * training data (the CLI uses the example count, shape, dtype and a CRC32C
   * of the first and last examples' bytes); NULL: the data is not checked.
   * Fields a backup lacks (one written before they were recorded) are not
   * checked. */
  const char *data_fingerprint;
  bool resume_anyway;
  /* Keras's validation_split (0 = none; else in (0, 1)): the last fraction
   * of the training rows, taken in source order before any shuffling
   * (n_train = floor(n * (1 - validation_split)), as Keras), is held out and
   * evaluated at each epoch end as `validation` would be. Needs `train` to
   * be rows of st_dataset_from_tensor_slices (optionally through take, skip
   * or shard right above it) under any of map, shuffle, batch, prefetch,
   * take, skip and shard, not repeat: fit rebuilds that pipeline over the
   * first n_train rows (same seeds and batch size: the batches the same
   * pipeline built over those rows would give) and batches the held-out rows
   * with the same batch size. The caller's `train` is not changed. As in
   * Keras, a non-NULL `validation` takes precedence (a warning is logged). */
  double validation_split;
  /* Keras's validation_freq: validation runs after 1-based epoch e when e is
   * a multiple of validation_freq (1, or 0, = every epoch), or, when
   * nvalidation_epochs > 0, when e is one of validation_epochs[] (borrowed;
   * Keras's list form). Epochs without validation have has_validation false
   * in their logs (History, CSVLogger, TensorBoard and progress leave val_*
   * out; EarlyStopping / save-best ModelCheckpoint monitoring val_* skip the
   * epoch with a warning, as Keras). Epochs count from the run's start (a
   * resumed backup's epochs included). */
  int validation_freq;
  const int *validation_epochs;
  int nvalidation_epochs;
  /* Keras's class_weight (borrowed [nclass_weight]; NULL = none): each
   * training example's loss term and gradient are multiplied by the weight of
   * its label's class (the index for sparse labels and single-value labels,
   * rounded half to even as Keras 3's tf.round; the first largest value's
   * index for one-hot rows), the sum
   * divided by the global batch as without weights (SUM_OVER_BATCH_SIZE); the
   * epoch's `loss` is sum(w_i * l_i) / examples, as Keras reports it, while
   * accuracy and validation stay unweighted. A training label whose class has
   * no weight is ST_ERR_INVALID naming the example. Not with the pipeline or
   * parameter_server strategies. */
  const float *class_weight;
  int nclass_weight;
  /* Keras's sample_weight: when true, each training example's labels carry
   * one more value at the end, its weight (labels of y_size = the loss's
   * width + 1, so weights follow shuffle, shard, batch and the replica
   * split); the loss term and gradient of the example are multiplied by it,
   * as class_weight's are (not together with class_weight, validation_split
   * nor the pipeline strategy; a non-finite weight is ST_ERR_INVALID naming
   * the example). Validation data has no weight column. */
  bool sample_weight_column;
  /* Keras's steps_per_epoch and validation_steps (0 = a whole pass). On a
   * dataset of infinite cardinality (st_dataset_repeat with -1) fit keeps one
   * iterator across the epochs, as Keras does: epoch e trains on batches
   * [e spe, (e + 1) spe) of one pass (that of epoch 0: a shuffle under the
   * repeat reshuffles each repetition), so every batch of the stream is
   * trained once; a resumed run (backup_dir) starts that pass again and
   * drops the batches its backup says were trained. Any other dataset is
   * iterated anew each epoch (st_dataset_iterate_epoch: that epoch's
   * shuffle) and an epoch trains on the first steps_per_epoch batches of its
   * pass (fewer when the pass ends first; Keras would go on through a
   * finite dataset whose size differs from steps_per_epoch and stop training
   * when it ends). Validation evaluates the first validation_steps batches
   * of a new pass each time (as Keras). An infinite dataset needs them: fit
   * refuses it otherwise ("st_model_fit: the training dataset is infinite
   * ...: set o->steps_per_epoch"), before any step. Unknown cardinality (-2:
   * TFRecord files, ...) runs until the pass ends. Negative values are
   * refused. */
  int64_t steps_per_epoch;
  int64_t validation_steps;
} st_fit_options;
/* One epoch, no validation, no callbacks, warmup 20, no backup. */
st_fit_options st_fit_default_options(void);
/* Train on batches of `train` (must be batched). m, train, o and out may not
 * be NULL, nor o->callbacks when o->ncallbacks > 0 (ST_ERR_INVALID naming
 * the argument); m must be compiled. *out (st_history_destroy) holds the
 * epochs' logs, also after a failure part-way. While a step's optimizer
 * update runs, the strategy may take the next batch from `train` on one of
 * its threads (one_device, central_storage): the same batches in the same
 * order, but map functions may run on a thread other than the caller's.
 * The data's example shape must be the model's input shape, dimension by
 * dimension (as Keras); the one exception is an implicit trailing channel of
 * 1 (images [h, w] into an input [h, w, 1]). Images are channels_last
 * (height, width, channels); a flat input [k] takes flat data [k] only
 * (reshape the tensor given to st_dataset_from_tensor_slices). The same rule
 * holds for evaluate and predict.
 * An infinite dataset (st_dataset_repeat with -1) with o->steps_per_epoch n
 * is one stream across the epochs, as Keras keeps its iterator: epoch e
 * trains on its batches [e n, (e + 1) n), a resumed run drops those its
 * backup trained; other datasets start a new pass each epoch
 * (st_fit_options.steps_per_epoch).
 * Checked before the first step (ST_ERR_INVALID): the sparse labels of
 * in-memory data (from_tensor_slices, through take/skip/shard, shuffle,
 * batch, prefetch and repeat; not map: those are checked per batch), naming
 * the bad label's source row; an EarlyStopping or save-best-only
 * ModelCheckpoint monitoring val_* without o->validation; a dataset without
 * labels (st_dataset_from_tensor_slices with y NULL): "st_model_fit: the
 * dataset has no labels". */
st_status st_model_fit(st_model *m, st_dataset *train, st_fit_options *o,
                       st_history *out);

/* Training memory of a compiled model, estimated (src/train/memory.c says
 * the formula): what its variables, optimizer slots and gradients and, for
 * a global batch of `batch` examples, its replicas' (or pipeline stages')
 * buffers take in this process. In bytes. */
typedef struct st_memory_estimate {
  int64_t batch;             /* the global batch asked for */
  int replicas;              /* replicas in this process (pipeline: its stages) */
  int64_t replica_batch;     /* examples a replica holds (pipeline: a micro-batch) */
  int optimizer_slots;       /* per trainable float (Adam: 2) */
  uint64_t weight_bytes;     /* weights, state, optimizer slots, gradients
                                (every replica's copies) */
  uint64_t activation_bytes; /* activations, layer caches, gradient buffers,
                                workspace and loss rows of every replica */
  uint64_t input_bytes;      /* the batch being trained (features and labels) */
  uint64_t total_bytes;      /* the three together */
  bool device;               /* trained on a GPU: the buffers are device memory */
} st_memory_estimate;
/* The estimate for m (compiled) at global batch `batch` (>= 1) into *out;
 * allocates nothing of the sort. ST_ERR_INVALID for a NULL or uncompiled m,
 * a NULL out or batch < 1. Caller's thread. */
st_status st_memory_estimate_training(const st_model *m, int64_t batch, st_memory_estimate *out);
/* The memory this process can still have, in bytes: MemAvailable
 * (/proc/meminfo) lowered to what a cgroup v2 memory.max or a set RLIMIT_AS
 * (ulimit -v) or RLIMIT_DATA leaves; *source (source may be NULL) names the
 * smallest ("MemAvailable", "the cgroup's memory.max", "ulimit -v
 * (RLIMIT_AS)", "RLIMIT_DATA"). ST_ERR_IO when none can be read. Any
 * thread. */
st_status st_memory_available(uint64_t *bytes, const char **source);
/* Training m at global batch `batch` fits in the memory this process can
 * have: ST_OK, or ST_ERR_NOMEM "the model needs about X GiB for training at
 * batch B (activations A GiB, weights+gradients+optimizer slots W GiB, input
 * batches I GiB); this process has Y GiB available besides the weights
 * (MemAvailable)" when what training has still to allocate, the estimate
 * less its weights (compile allocated them, so they are already out of what
 * is available), exceeds st_memory_available. ST_OK without comparing when
 * the model trains on a GPU or the available memory cannot be read. est and
 * available may be NULL: they receive the estimate and the bytes available
 * (0: not read). Errors of st_memory_estimate_training otherwise. Allocates
 * nothing of the sort, so call it before st_model_fit: Linux overcommits
 * and a batch that does not fit is otherwise ended by the OOM killer once
 * its pages are touched. Caller's thread. */
st_status st_model_check_training_memory(const st_model *m, int64_t batch,
                                         st_memory_estimate *est, uint64_t *available);

typedef struct st_eval_result {
  double loss, accuracy;
  int64_t examples;
  /* Several outputs: noutputs of them (0 for a model of one output), with
   * output j's mean loss (unweighted) and metric (Keras's "<name>_loss",
   * "<name>_accuracy" with the output layer's name); loss is the weighted
   * sum of the outputs' losses, accuracy the metric over all outputs'
   * predictions together. */
  int noutputs;
  double output_loss[ST_MAX_OUTPUTS], output_accuracy[ST_MAX_OUTPUTS];
} st_eval_result;
/* Mean loss and metric over every example of ds (batched, labelled) into
 * *out. m (compiled), ds and out may not be NULL (ST_ERR_INVALID); a dataset
 * without labels is refused ("st_model_evaluate: the dataset has no labels"). */
st_status st_model_evaluate(st_model *m, st_dataset *ds, st_eval_result *out);
/* Outputs for every example of ds: out is f32 [n, output size] (caller frees
 * with st_tensor_destroy). m (compiled), ds and out may not be NULL. ds may
 * have labels or not (st_dataset_from_tensor_slices with y NULL): labels are
 * not used, and the predictions are the same either way. */
st_status st_model_predict(st_model *m, st_dataset *ds, st_tensor *out);
/* evaluate and predict over the first `steps` batches of ds only (Keras's
 * steps argument; 0 = the whole pass, as st_model_evaluate / predict; fewer
 * when the pass ends first). A dataset of infinite cardinality (st_dataset_repeat
 * with -1) needs steps > 0: st_model_evaluate, st_model_predict and these
 * with steps 0 refuse it at once ("st_model_evaluate: the dataset is infinite
 * ...: give steps"); a negative steps is ST_ERR_INVALID. */
st_status st_model_evaluate_steps(st_model *m, st_dataset *ds, int64_t steps,
                                  st_eval_result *out);
st_status st_model_predict_steps(st_model *m, st_dataset *ds, int64_t steps, st_tensor *out);

/* Keras-style progress ("Epoch 1/3", a bar with ETA when tty, else one line per
 * epoch) written to `stream` (borrowed; the CLI passes stderr). */
st_status st_progress_create(FILE *stream, bool tty, int epochs, st_callback *out);

/* safetensors: one tensor per variable named "<layer>/<param>", e.g.
 * "dense/kernel" [in, out], "conv2d/kernel" [kh, kw, in, out] (Keras layout).
 * Written to a temp file, fsynced and renamed. m must be compiled; a NULL m
 * or path is ST_ERR_INVALID. */
st_status st_model_save_weights(const st_model *m, const char *path);
/* Checks every name, dtype and shape before changing anything (m and path
 * not NULL). Before compile (as Keras's load_weights on a built model) the
 * weights are kept and st_model_compile starts from them instead of the
 * initializers; a later load before compile replaces them. */
st_status st_model_load_weights(st_model *m, const char *path);

/* ---- checkpoints ----
 * A checkpoint directory holds ckpt-<step>/ directories — weights.safetensors
 * (variables, named as st_model_save_weights names them),
 * optimizer.safetensors (slots "<layer>/<param>/<slot>") and state.json
 * (format version, step, epoch and position in it, the partial epoch's sums,
 * finished epochs' logs, seed, optimizer and learning-rate schedule, and a
 * CRC32C per tensor) — and `latest`, naming the newest complete one. A
 * checkpoint is written under a temporary name, fsynced, renamed; `latest` is
 * replaced last, so it always names a complete checkpoint. */
typedef struct st_checkpoint_options {
  int keep;                      /* newest checkpoints kept (default 3; 0 = all) */
  int64_t test_fail_after_bytes; /* test hook: the write stops after this many
                                    bytes, as a crash would (0 = off) */
} st_checkpoint_options;
/* keep 3, no test hook. */
st_checkpoint_options st_checkpoint_default_options(void);
/* Save variables, optimizer slots and the training position into dir. Under
 * multi_worker_mirrored only the chief writes; on other workers this returns
 * ST_OK without writing (call it on every worker: with shard_optimizer the
 * slots are first gathered from all of them, a collective). m (compiled), dir and o may not be NULL
 * (ST_ERR_INVALID naming the argument). */
st_status st_checkpoint_save(st_model *m, const char *dir, const st_checkpoint_options *o);
/* Restore from dir/latest (or from a ckpt-* directory given directly). Every
 * checksum, name and shape is verified before the model changes; errors name
 * the file, tensor and field. m (compiled) and dir may not be NULL. */
st_status st_checkpoint_restore(st_model *m, const char *dir);
/* The directory dir/latest names, into out[n]; ST_ERR_IO if there is none;
 * dir and out may not be NULL (ST_ERR_INVALID). */
st_status st_checkpoint_latest(const char *dir, char *out, size_t n);
/* Keras ModelCheckpoint: a checkpoint in dir at each epoch end, or only when
 * the monitored value improved (save_best_only; monitor as EarlyStopping;
 * monitor may be NULL: "val_loss"). ST_ERR_INVALID for no dir, a dir over 4095 bytes, or
 * (save_best_only) an unknown monitor. */
st_status st_model_checkpoint_create(const char *dir, const char *monitor, bool save_best_only,
                                     int keep, st_callback *out);

/* ---- weights as one host vector, stopping, learning rate ---- */
/* Floats of all variables: trainable params then non-trainable state. */
size_t st_model_weights_size(const st_model *m);
/* Copy every variable to/from host memory out[st_model_weights_size(m)]
 * (m compiled; m and the buffer not NULL). */
st_status st_model_get_weights(const st_model *m, float *out);
st_status st_model_set_weights(st_model *m, const float *in);
/* Ask fit to stop after the current epoch (Keras model.stop_training);
 * ignores NULL. */
void st_model_stop_training(st_model *m);
/* Current learning rate, and replacing it by a constant (LearningRateScheduler).
 * The optimizer keeps the rate as a float: ST_ERR_INVALID (model unchanged)
 * unless lr is finite, > 0 and stays > 0 as a float. */
double st_model_learning_rate(const st_model *m);
st_status st_model_set_learning_rate(st_model *m, double lr);

/* ---- more callbacks (Keras names); each writes the callback to *out (zeroed
 * on failure), to be freed with st_callback_destroy ---- */
/* CSVLogger: one row per epoch: epoch,loss,accuracy,val_loss,val_accuracy,lr
 * (val_* empty without validation). The file is created at the first epoch's
 * end and rewritten atomically after each epoch, so a path in a missing
 * directory is reported then (ST_ERR_IO), not here; ST_ERR_INVALID for a NULL
 * or empty path. */
st_status st_csv_logger_create(const char *path, st_callback *out);
typedef struct st_early_stopping_options {
  const char *monitor;      /* "val_loss" (default), "loss", "val_accuracy", "accuracy" */
  double min_delta;         /* 0 */
  int patience;             /* 0 */
  bool restore_best_weights;/* false */
} st_early_stopping_options;
/* The defaults noted above. */
st_early_stopping_options st_early_stopping_default_options(void);
/* Stops training when the monitored value has not improved by min_delta for
 * patience epochs ("accuracy" metrics improve upwards, losses downwards).
 * With restore_best_weights, a fit it stopped ends with the best epoch's
 * weights, put back when fit ends (as Keras's on_train_end): every callback
 * of the stopping epoch, before or after it in the list, sees that epoch's
 * own weights. ST_ERR_INVALID for an unknown monitor or a negative patience. */
st_status st_early_stopping_create(st_early_stopping_options o, st_callback *out);
typedef double (*st_lr_schedule_fn)(void *user, int epoch, double lr);
/* LearningRateScheduler: lr for epoch (0-based) from the current lr. user is
 * borrowed (passed to fn). ST_ERR_INVALID when fn is NULL. */
st_status st_lr_scheduler_create(st_lr_schedule_fn fn, void *user, st_callback *out);

/* ---- TensorBoard ---- */
/* Event files as TensorBoard reads them: <dir>/train/ and <dir>/validation/,
 * each holding events.out.tfevents.<unix time>.<host> — TFRecord frames
 * (length, masked CRC32C of the length, Event protobuf, masked CRC32C of the
 * data) whose Events carry a file_version record then simple scalar
 * summaries. */
typedef struct st_tensorboard st_tensorboard;
/* Checks that log_dir can be created (ST_ERR_IO naming the blocking path);
 * a run's directory and event file appear with its first scalar. */
st_status st_tensorboard_create(const char *log_dir, st_tensorboard **out);
/* A scalar at step in the train (validation = false) or validation run. */
st_status st_tensorboard_scalar(st_tensorboard *tb, bool validation, const char *tag,
                                int64_t step, double value);
/* Writes fail with ST_ERR_IO naming the file; a run's file that is still
 * empty then (its first write failed: a full disk) is removed, with the run
 * directory and log_dir when this writer created them and they are empty
 * (a later scalar of that run creates them again). */
st_status st_tensorboard_flush(st_tensorboard *tb);
void st_tensorboard_destroy(st_tensorboard *tb); /* flushes, closes; accepts NULL */
/* Keras TensorBoard callback: per epoch epoch_loss, epoch_accuracy (train and
 * validation), epoch_learning_rate and epoch_samples_per_sec (train); every
 * update_freq steps (0 = never) batch_loss and batch_accuracy (train).
 * tb is borrowed (destroy it after the callback); ST_ERR_INVALID when tb is
 * NULL or update_freq < 0. */
st_status st_tensorboard_callback_create(st_tensorboard *tb, int update_freq, st_callback *out);

/* ---- pictures ---- */
/* Loss and accuracy curves (train and, if present, validation per epoch) as a
 * self-contained SVG with axes, ticks and a legend; written atomically
 * (title may be NULL: no title). */
st_status st_plot_history_svg(const st_history *h, const char *title, const char *path);

/* ---- Keras model export ---- */
/* The model as Keras 3's model.to_json() writes it ("Sequential", or
 * "Functional" with each layer's calls), into *out (malloc'd, free() it):
 * Keras and st_model_from_keras_json read it back to the same model.
 * ST_ERR_INVALID naming the layer when a layer kind has no Keras writer.
 * Any thread; the model is only read. */
st_status st_model_to_keras_json(const st_model *m, char **out);

/* ---- Keras model import ---- */
/* A Keras `model.to_json()` Sequential (Keras 2 and 3 layouts) with Dense,
 * Conv2D, MaxPooling2D, AveragePooling2D, Flatten, Dropout,
 * BatchNormalization, Activation, ReLU, Softmax, InputLayer, Reshape,
 * GlobalAverage/MaxPooling1D/2D, ZeroPadding2D, LeakyReLU. The
 * input shape comes from the config (batch_input_shape / batch_shape);
 * o->input_shape is ignored, the rest of o is used. An unsupported layer or
 * option is an error naming the layer's position, name and the option. Sizes,
 * depth (64) and file size (16 MiB) are capped; duplicate keys are rejected. */
st_status st_model_from_keras_json(const char *path, const st_model_options *o,
                                   st_model **out);
/* The same from the JSON text itself: len bytes at text (need not end in a
 * NUL; capped at 16 MiB). origin names the text in errors where a file's
 * path would be ("model_from_json: layer 2 ('d', Dense): ..."); origin may be
 * NULL: "Keras JSON". Invalid JSON is ST_ERR_FORMAT naming line and column.
 * st_model_from_keras_json reads the file and calls this. Any thread. */
st_status st_model_from_keras_json_text(const char *text, size_t len, const char *origin,
                                        const st_model_options *o, st_model **out);

/* ---- built-in models ---- */
/* Names of the built-in models, NULL-terminated: "mlp", "cnn", "resnet20",
 * "mobilenet-tiny" (graphs: src/train/builtin_graphs.c says what they are). */
const char *const *st_builtin_model_names(void);
/* Create the named built-in model (uncompiled) with the given options; the
 * input shape in o is replaced by the model's own (28x28x1 for both):
 *   mlp: Flatten -> Dense 256 relu -> Dense 128 relu -> Dense 10
 *   cnn: Conv2D 32 3x3 relu -> MaxPool 2 -> Conv2D 64 3x3 relu -> MaxPool 2
 *        -> Flatten -> Dense 128 relu -> Dense 10          (logits) */
st_status st_builtin_model_create(const char *name, const st_model_options *o,
                                  st_model **out);

/* ---- GPT-2 (src/train/builtin_gpt.c; llm.c checkpoints: src/io/llmc.c) ---- */
typedef struct st_gpt_config {
  int n_layer, n_head, n_embd; /* blocks, heads, width (a multiple of n_head) */
  int seq_len;                 /* T: the input is [T] token ids (as floats) */
  int vocab;                   /* token ids in [0, vocab) */
} st_gpt_config;
/* The small default: 4 layers, 4 heads, width 128, T 64, vocab 256 (bytes). */
st_gpt_config st_gpt_default_config(void);
/* "small" (the default) or "gpt2-124m" (12, 12, 768, T 1024, vocab 50257);
 * ST_ERR_INVALID naming an unknown preset. */
st_status st_gpt_preset(const char *name, st_gpt_config *out);
/* ST_ERR_INVALID naming the field (and its CLI flag) that is out of range. */
st_status st_gpt_check_config(const st_gpt_config *c);
/* GPT-2 as a functional model (uncompiled): input [seq_len] ids, output
 * [seq_len, vocab] logits, its head tied to the token embedding (compile it
 * with ST_LOSS_SPARSE_CE_LOGITS: labels [seq_len] next tokens, the loss the
 * mean over every position). Layer names: wte, wpe, h<i>_ln_1, h<i>_attn,
 * h<i>_ln_2, h<i>_mlp_fc, h<i>_mlp_proj, ln_f, lm_head. */
st_status st_gpt_create(const st_gpt_config *c, const st_model_options *o, st_model **out);
/* GPT-2's initialisation (llm.c / nanoGPT) of a compiled GPT model: normal
 * 0.02 (wpe 0.01), residual projections 0.02/sqrt(2 n_layer), LayerNorm 1/0,
 * biases 0; parameter p of layer i draws from RNG stream (seed, i, p). */
st_status st_gpt_init_weights(st_model *m, uint64_t seed);
/* llm.c's checkpoint (gpt2_124M.bin: 256 int32 header, magic 20240326,
 * version 3, maxT, V, L, NH, C, Vp; then wte [Vp,C], wpe [maxT,C], ln1w,
 * ln1b, qkvw [L,3C,C], qkvb, attprojw [L,C,C], attprojb, ln2w, ln2b, fcw
 * [L,4C,C], fcb, fcprojw [L,C,4C], fcprojb, lnfw, lnfb) into/from a compiled
 * GPT model of config c. Load: ST_ERR_INVALID naming the file and the header
 * field that disagrees with c (maxT must be >= seq_len; wpe rows beyond
 * seq_len and wte rows beyond vocab are not read), ST_ERR_IO naming the file
 * for a short or unreadable one. Save writes maxT = seq_len, Vp = vocab
 * rounded up to 64 (padded rows zero), atomically. */
st_status st_gpt_load_llmc(st_model *m, const st_gpt_config *c, const char *path);
st_status st_gpt_save_llmc(const st_model *m, const st_gpt_config *c, const char *path);
/* The same weights as Hugging Face's GPT2LMHeadModel safetensors
 * (transformer.wte.weight, transformer.h.<i>.attn.c_attn.weight [C, 3C]
 * Conv1D layout, ...; docs/FORMATS.md). Save writes every name with the
 * "transformer." prefix (lm_head.weight is wte: not written), atomically.
 * Load accepts the names with or without the prefix, ignores other tensors
 * (the attention masks "attn.bias"), takes the first vocab rows of wte and
 * seq_len rows of wpe; ST_ERR_INVALID naming the file and the tensor that is
 * missing or of another shape, ST_ERR_FORMAT/ST_ERR_IO for a damaged or
 * unreadable file. */
st_status st_gpt_save_hf(const st_model *m, const st_gpt_config *c, const char *path);
st_status st_gpt_load_hf(st_model *m, const st_gpt_config *c, const char *path);

#ifdef __cplusplus
}
#endif
#endif
