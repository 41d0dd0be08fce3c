/* Internal: the network a strategy trains, and the per-replica executor.
 *
 * st_net is what replicas and strategies need of a model: its layers, the
 * layout of its variables, the variables themselves, the optimizer, loss and
 * metric it was compiled with and the optimizer step. The model around it
 * (src/model/model.h: name, compile options, strategy, what fit keeps) is a
 * layer above distribute/; nn/ knows nothing of it.
 *
 * Variables live in flat buffers carved into named views (one st_param_spec per
 * layer parameter gives its offset):
 *   params [n_params]  trainable variables (the primary copy, host memory)
 *   state  [n_state]   non-trainable variables (BatchNorm moving statistics)
 *   slots  [n_slots][n_params] optimizer slots (Adam m, v; ...)
 * A replica owns what one device needs to run forward and backward on its slice
 * of a batch: gradients, activations, caches, scratch; its variables are either
 * its own copy (mirrored) or borrowed from the net (one-device, central
 * storage). The strategy decides which. */
#ifndef STRATA_NN_NET_H
#define STRATA_NN_NET_H

#include "backend/impl.h"
#include "nn/layer.h"

typedef struct st_net {
  st_shape input_shape;       /* per example */
  uint64_t seed;              /* weights init and dropout RNG streams */
  int nlayers, cap;
  st_layer **layers;          /* owned [cap], nlayers used */
  size_t n_params, n_state;   /* floats; fixed once compiled */
  /* set when compiled */
  const st_backend *be;
  st_backend_ctx *be_ctx;     /* owned: host-side work on the variables below
                                 (compile, weights, checkpoints, central
                                 storage's update) */
  float *params, *state;      /* [n_params], [n_state]; backend memory */
  int n_slots;
  float *slots[4];            /* [n_params] each */
  st_optimizer_options optimizer; /* live: callbacks change the learning rate */
  st_loss_kind loss;
  int nmetrics;
  st_metric_kind metrics[4];
  int64_t step;               /* optimizer updates applied so far */
  /* Keras's class_weight while fit trains (borrowed; NULL = none): each
   * example's training loss term and its gradient are multiplied by
   * class_weight[class] (st__net_example_class); evaluation is unweighted. */
  const float *class_weight;
  int n_class_weight;
  /* Keras's sample_weight while fit trains (borrowed; NULL = none): the
   * weight of the example whose label row is sample_labels + k * label
   * width is sample_weights[k] (fit's de-interleaved copy of the batch: the
   * replicas' slices point into it). */
  const float *sample_weights, *sample_labels;
  /* Pipeline stage across processes (base/vmem.h): params, state and slots
   * are reserved address space of which only the trainable floats
   * [own_p, own_p + own_np) and the state floats [own_s, own_s + own_ns) are
   * memory (its layers' share); false: backend allocations, all memory. */
  bool reserved;
  size_t own_p, own_np, own_s, own_ns;
} st_net;

/* ---- per-replica executor ---- */
typedef struct st_replica {
  int index;                  /* replica id within the strategy */
  const st_backend *be;
  st_backend_ctx *ctx;        /* owned: every kernel call on this replica */
  int nlayers;
  int max_batch;              /* buffers below hold this many examples */
  float *params, *state;      /* own (owns_vars) or borrowed */
  bool owns_vars;
  bool params_borrowed;       /* owns_vars but params belong to the net */
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
st_status st__replica_create(const st_net *m, const st_backend *be, int index,
                             int max_batch, float *params, float *state,
                             st_replica **out);
void st__replica_destroy(st_replica *r); /* accepts NULL */
/* Grow buffers so a batch of n fits (no-op when it already does). */
st_status st__replica_reserve(const st_net *m, st_replica *r, int n);

/* Forward over n examples of x [n, input]; returns the output [n, out]
 * (a replica buffer). `step` keys the dropout RNG. */
const float *st__replica_forward(const st_net *m, st_replica *r,
                                 const float *x, int n, bool training,
                                 int64_t step);
/* Called after layer i's gradients are final (layers finish in reverse order),
 * so a strategy can start reducing them while backward continues. */
typedef void (*st_grads_ready_fn)(void *ctx, int layer);
/* Loss on the last forward output against y, scaled by 1/global_batch, then
 * backward through every layer, writing r->grads. Returns the sum of the
 * per-example losses (unscaled). With n == 0 the gradients are zero. */
double st__replica_loss_backward(const st_net *m, st_replica *r,
                                 const float *x, const float *y, int n,
                                 int64_t global_batch, int64_t step,
                                 st_grads_ready_fn ready, void *ready_ctx);
/* Per-example loss sum of the last forward output against y (no gradient). */
double st__replica_loss(const st_net *m, st_replica *r, const float *y,
                        int n);

/* Pointer to parameter p of layer l inside a variable set. */
static inline float *st__var_ptr(const st_layer *l, int p, float *params,
                                 float *state) {
  return (l->params[p].trainable ? params : state) + l->params[p].offset;
}
/* The output shape of the last layer (the input shape without layers), and
 * its size in floats. */
st_shape st__net_output_shape(const st_net *m);
size_t st__net_output_size(const st_net *m);
/* Sparse losses: each of y[0..n) must be a class index in [0, outputs)
 * (checked before a kernel uses it as an index); ST_ERR_INVALID naming the
 * label and its example (first + i) otherwise. OK for the other losses. */
st_status st__net_check_labels(const st_net *m, const float *y, int n, int64_t first);
/* The class of one example's label row y (Keras 3's class_weight map: the
 * index itself for sparse losses and single-value labels, rounded half to
 * even as tf.round; the first largest value's index for labels of several
 * values). */
int64_t st__net_example_class(const st_net *m, const float *y);
/* With class weights set: every example's class in [0, n_class_weight)
 * (ST_ERR_INVALID naming the example, first + i, otherwise). OK without. */
st_status st__net_check_classes(const st_net *m, const float *y, int n, int64_t first);
/* Multiply loss[i] and the row dpred[i] (cols floats; may be NULL) by the
 * class weight of example i's label, or its sample weight (y points into
 * m->sample_labels); a no-op without either. */
void st__net_apply_example_weights(const st_net *m, st_replica *r, const float *y, int n,
                                 int cols, float *loss, float *dpred);
/* True if some layer runs collectives (every replica must then run forward and
 * backward each step, with an empty slice too). */
bool st__net_uses_collectives(const st_net *m);
/* Initialise params and state from the net seed (layer i, param p draws from
 * RNG stream st__layer_init_stream(i, p)), on the host. */
void st__net_init_variables(const st_net *m, float *params, float *state);
/* The same for layers [lo, hi) only (the values st__net_init_variables gives them). */
void st__net_init_layers(const st_net *m, int lo, int hi, float *params, float *state);
/* The largest per-example activation size over input and all layers. */
size_t st__net_max_activation(const st_net *m);

#endif
