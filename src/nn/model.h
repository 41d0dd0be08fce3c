/* Internal: the Sequential model and the per-replica executor.
 *
 * Variables live in flat buffers carved into named views (one st_param_spec per
 * layer parameter gives its offset):
 *   params [n_params]  trainable variables (the primary copy, host memory)
 *   state  [n_state]   non-trainable variables (BatchNorm moving statistics)
 *   slots  [n_slots][n_params] optimizer slots (Adam m, v; ...)
 * A replica owns what one device needs to run forward and backward on its slice
 * of a batch: gradients, activations, caches, scratch; its variables are either
 * its own copy (mirrored) or borrowed from the model (one-device, central
 * storage). The strategy decides which. */
#ifndef STRATA_NN_MODEL_H
#define STRATA_NN_MODEL_H

#include "backend/impl.h"
#include "nn/layer.h"
#include "strata/train.h"

struct st_model {
  char name[ST_NAME_MAX];
  st_shape input_shape;
  uint64_t seed;
  st_strategy *strategy;      /* borrowed, or owned when owns_strategy */
  bool owns_strategy;
  int nlayers, cap;
  st_layer **layers;          /* owned */
  size_t n_params, n_state;   /* floats; fixed once compiled */
  /* set by compile */
  bool compiled;
  st_compile_options compile;
  const st_backend *be;
  st_backend_ctx *be_ctx;     /* owned: host-side work on the variables below
                                 (compile, weights, checkpoints, central
                                 storage's update) */
  float *params, *state;      /* [n_params], [n_state]; backend memory */
  int n_slots;
  float *slots[4];            /* [n_params] each */
  int64_t step;               /* optimizer updates applied so far */
  bool stop_training;         /* set by a callback: fit ends after this epoch */
  /* Where training stands (kept by fit, saved in checkpoints): epochs done,
   * batches done in the current epoch and that partial epoch's sums, and the
   * logs of finished epochs of this fit. */
  struct st_train_position {
    int64_t epoch, step_in_epoch;
    double loss_sum;
    int64_t examples, correct, metric_count;
    int nlogs;
    st_epoch_logs *logs; /* malloc'd [nlogs] */
  } pos;
};

/* ---- per-replica executor ---- */
typedef struct st_replica {
  int index;                  /* replica id within the strategy */
  const st_backend *be;
  st_backend_ctx *ctx;        /* owned: every kernel call on this replica */
  int nlayers;
  int max_batch;              /* buffers below hold this many examples */
  float *params, *state;      /* own (owns_vars) or borrowed */
  bool owns_vars;
  bool params_borrowed;       /* owns_vars but params belong to the model */
  float *grads;               /* [n_params] */
  float **acts;               /* acts[i]: output of layer i [max_batch, out_i] */
  float **caches;             /* caches[i]: [max_batch * cache_per_example_i] */
  float *workspace;           /* max over layers of workspace_floats(max_batch) */
  float *dbuf[2];             /* ping-pong [max_batch * max activation size] */
  float *loss_rows;           /* [max_batch] per-example loss */
  /* Sum n floats across the replicas of the strategy (synchronized
   * BatchNorm); NULL when the replica runs alone. */
  void (*all_reduce_sum)(void *ctx, float *buf, size_t n);
  void *all_reduce_ctx;
} st_replica;

/* Create a replica able to run batches of up to max_batch examples, with its
 * own context of backend be (device `index`). If params/state are NULL the
 * replica allocates its own copies (zeroed). */
st_status st__replica_create(const st_model *m, const st_backend *be, int index,
                             int max_batch, float *params, float *state,
                             st_replica **out);
void st__replica_destroy(st_replica *r); /* accepts NULL */
/* Grow buffers so a batch of n fits (no-op when it already does). */
st_status st__replica_reserve(const st_model *m, st_replica *r, int n);

/* Forward over n examples of x [n, input]; returns the output [n, out]
 * (a replica buffer). `step` keys the dropout RNG. */
const float *st__replica_forward(const st_model *m, st_replica *r,
                                 const float *x, int n, bool training,
                                 int64_t step);
/* Called after layer i's gradients are final (layers finish in reverse order),
 * so a strategy can start reducing them while backward continues. */
typedef void (*st_grads_ready_fn)(void *ctx, int layer);
/* Loss on the last forward output against y, scaled by 1/global_batch, then
 * backward through every layer, writing r->grads. Returns the sum of the
 * per-example losses (unscaled). With n == 0 the gradients are zero. */
double st__replica_loss_backward(const st_model *m, st_replica *r,
                                 const float *x, const float *y, int n,
                                 int64_t global_batch, int64_t step,
                                 st_grads_ready_fn ready, void *ready_ctx);
/* Per-example loss sum of the last forward output against y (no gradient). */
double st__replica_loss(const st_model *m, st_replica *r, const float *y,
                        int n);

/* Pointer to parameter p of layer l inside a variable set. */
static inline float *st__var_ptr(const st_layer *l, int p, float *params,
                                 float *state) {
  return (l->params[p].trainable ? params : state) + l->params[p].offset;
}
size_t st__model_output_size(const st_model *m);
/* True if some layer runs collectives (every replica must then run forward and
 * backward each step, with an empty slice too). */
bool st__model_uses_collectives(const st_model *m);
/* Initialise params and state from the model seed (layer i, param p draws from
 * RNG stream i*ST_LAYER_MAX_PARAMS + p), on the host. */
void st__model_init_variables(const st_model *m, float *params, float *state);
/* The largest per-example activation size over input and all layers. */
size_t st__model_max_activation(const st_model *m);

#endif
