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

#define ST_NET_MAX_IO 8 /* model inputs, model outputs */
#define ST_NET_MAX_REPLICAS 64 /* = ST_MAX_REPLICAS (strategy.c checks) */

/* One call of a layer in the net's graph. Tensors are named by int: t >= 0
 * is node t's output, t < 0 model input -1 - t (st__net_tensor_input). */
typedef struct st_net_node {
  int layer;                      /* index into layers[] */
  int n_in;
  int in[ST_LAYER_MAX_INPUTS];    /* tensor ids, each produced before this node */
} st_net_node;

static inline int st__net_input_tensor(int j) { return -1 - j; }

typedef struct st_net {
  /* Per example: the model's input (Sequential), or, with several inputs,
   * [sum of their sizes]: an example's row holds input 0's values, then
   * input 1's, ... (what a dataset yields; the replica splits it). */
  st_shape input_shape;
  uint64_t seed;              /* dropout RNG streams (and weights init, by default) */
  uint64_t init_seed;         /* weights init: the seed, or st_model_set_init_seed's */
  int nlayers, cap;
  st_layer **layers;          /* owned [cap], nlayers used; in the order of
                                 their first call (so variables, laid out in
                                 layer order, finish backward last to first) */
  /* The graph: nodes in a topological order (Sequential: node i calls
   * layer i on node i-1's output). A layer called by several nodes shares
   * its variables; their gradients are summed. */
  int nnodes, node_cap;
  st_net_node *nodes;         /* owned [node_cap] */
  int n_inputs;               /* >= 1 */
  st_shape inputs[ST_NET_MAX_IO];
  int output;                 /* the output tensor (a node); with several
                                 outputs, the last of them in node order */
  /* Several outputs (Keras's Model(inputs, [a, b]); 1 otherwise): output j
   * is node outputs[j], trained with loss out_loss[j] scaled by
   * out_weight[j]. The model's output row is their concatenation (output
   * 0's values, then output 1's, ...: what predict returns) and an
   * example's label row the concatenation of each output's label (1 float
   * for a sparse loss, the output's size otherwise). */
  int n_outputs;
  int outputs[ST_NET_MAX_IO];
  st_loss_kind out_loss[ST_NET_MAX_IO];
  float out_weight[ST_NET_MAX_IO];
  size_t n_params, n_state;   /* floats; fixed once compiled */
  /* set when compiled */
  const st_backend *be;
  st_backend_ctx *be_ctx;     /* owned: host-side work on the variables below
                                 (compile, weights, checkpoints, central
                                 storage's update) */
  int replica_device[ST_NET_MAX_REPLICAS]; /* a device backend: replica i's
                                 device (the strategy's GPUs; 0 otherwise) */
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
  /* A table tied across stages (distribute/pipeline.h) in such a net: the
   * trainable floats [tie_p, tie_p + tie_np) are held as values only
   * (tie_slots false: the lookup's stage, within its own range) or as values
   * and optimizer slots (true: the head's stage, outside its range);
   * tie_np 0: none. */
  size_t tie_p, tie_np;
  bool tie_slots;
} st_net;

/* ---- per-replica executor ---- */
typedef struct st_replica {
  int index;                  /* replica id within the strategy */
  const st_backend *be;
  st_backend_ctx *ctx;        /* owned: every kernel call on this replica */
  int nnodes;                 /* the net's, when created */
  int max_batch;              /* buffers below hold this many examples */
  float *params, *state;      /* own (owns_vars) or borrowed */
  bool owns_vars;
  bool params_borrowed;       /* owns_vars but params belong to the net */
  float *grads;               /* [n_params] */
  float **acts;               /* acts[k]: output of node k [max_batch, out_k] */
  float **caches;             /* caches[k]: [max_batch * cache_per_example of k's layer] */
  int n_tslots;               /* st__net_transient_slots */
  float **tslots;             /* [n_tslots]: shared outputs [max_batch * slot floats];
                                 acts[k] points into one when tslot_of[k] >= 0 */
  int *tslot_of;              /* [nnodes] */
  bool *remat_of;             /* [nnodes]: st__net_rematerialized */
  float *remat;               /* where they are rebuilt: the largest of tslots
                                 (NULL: none) */
  float *workspace;           /* max over layers of workspace_floats(max_batch) */
  int n_gslots;               /* st__net_grad_slots */
  float **gslots;             /* gradient slots [max_batch * max activation size] */
  float *gscratch;            /* [max trainable floats of a layer]: a shared
                                 layer's second call's gradients (NULL: none) */
  float *inbuf[ST_NET_MAX_IO]; /* several inputs: input j [max_batch, size_j] */
  float *loss_rows;           /* [max_batch] per-example loss */
  /* A device backend (not st__be_is_host): the batch's inputs and labels
   * copied in, and host copies of the output and the per-example losses
   * (the host reads those). NULL on host backends. */
  float *xdev, *ydev;         /* [max_batch * input], [max_batch * label width] */
  float *outkeep;             /* [max_batch * output]: a training step's outputs
                                 kept on the device for the metrics, read
                                 after backward (st__replica_keep_output) */
  float *hout, *hloss;        /* host: [max_batch * output], [max_batch] */
  float *hsplit;              /* host: several inputs, one input's rows */
  /* Several outputs: outcat [max_batch, sum of outputs] (their
   * concatenation), ylab [max_batch, max output size] (one output's labels),
   * out_rows [max_batch] (one output's per-example loss); NULL otherwise. */
  float *outcat, *ylab, *out_rows;
  /* Sum n floats across the replicas of the strategy (synchronized
   * BatchNorm); NULL when the replica runs alone. */
  void (*all_reduce_sum)(void *ctx, float *buf, size_t n);
  void *all_reduce_ctx;
  /* Forward-only buffers for evaluate / predict batches larger than the
   * training buffers (replica_infer.c; NULL: none); while active, acts,
   * caches, workspace, inbuf and the loss rows point into them. */
  struct st__infer *infer;
} st_replica;

/* Called after layer i's gradients are final (layers finish in reverse order),
 * so a strategy can start reducing them while backward continues. */
typedef void (*st_grads_ready_fn)(void *ctx, int layer);

/* ---- the graph executor (graph.c): nodes [lo, hi) over one set of buffers,
 * shared by the replica (every node) and a pipeline stage (its range) ---- */
typedef struct st_exec {
  const st_backend *be;
  st_backend_ctx *ctx;
  int lo, hi;                 /* the nodes run */
  float **acts;               /* [hi - lo]: node k's output is acts[k - lo] */
  float **caches;             /* [hi - lo] */
  float *workspace;
  const bool *remat_of;       /* [hi - lo]: node output rebuilt into remat
                                 before a backward reads it (its buffer is
                                 shared); NULL: every output has its own */
  float *remat;               /* [n * st__net_remat_floats] at least */
  float **gslots;             /* st__net_grad_slots(m, lo, hi) buffers of
                                 n * st__net_max_activation floats (a
                                 replica's: st__net_grad_slot_floats) */
  size_t *slot_high;          /* counting only (gslots NULL): each slot's
                                 largest tensor per example, maxed in */
  float *gscratch;            /* [max layer trainable floats]: needed when a
                                 layer is called twice, or accumulate */
  float *params, *state;      /* the variables the layers read */
  float *grads;               /* dw of variable offset o: grads + o - grads_base */
  size_t grads_base;
  bool accumulate;            /* add to grads (pipeline micro-batches) instead
                                 of overwriting them */
  uint64_t stream_key;        /* dropout: the replica index or micro-batch */
  void (*all_reduce_sum)(void *ctx, float *buf, size_t n);
  void *all_reduce_ctx;
  /* Tensors from outside the range: n_ext of them, ext[i] holding tensor
   * ext_id[i] (model inputs; a stage's input), ext_dx[i] its gradient (NULL =
   * not needed; the backward pass writes it, summing over its consumers). */
  /* Gradients given at the start of backward (several model outputs): the
   * tensors seed_id[0..n_seed) take their gradient from gslots[0..n_seed)
   * (in that order; seed_id[i] in [lo, hi)). n_seed 0: node hi-1's, from
   * dy or gslots[0]. */
  int n_seed;
  int seed_id[ST_NET_MAX_IO];
  int n_ext;
  int ext_id[ST_NET_MAX_IO];
  /* A table tied across pipeline stages (pipeline.h): the gradient of the
   * trainable floats [tied_off, tied_off + tied_n) goes to tied_dw +
   * (offset - tied_off), always overwritten (never accumulated, whatever
   * accumulate says); tied_dw NULL: none. */
  size_t tied_off, tied_n;
  float *tied_dw;
  const float *ext[ST_NET_MAX_IO];
  float *ext_dx[ST_NET_MAX_IO];
} st_exec;

/* Forward of nodes [e->lo, e->hi) on n examples; returns node hi-1's output. */
const float *st__exec_forward(const st_net *m, st_exec *e, int n, bool training, int64_t step);
/* Backward from dy [n, out] (the gradient of node hi-1's output; clobbered;
 * NULL: it is in e->gslots[0], which is reused once read) through nodes
 * [lo, hi): weight gradients to e->grads, the external tensors' gradients to
 * e->ext_dx. ready(layer) is called once a layer's gradients are final
 * (layers in decreasing order). */
void st__exec_backward(const st_net *m, st_exec *e, float *dy, int n, int64_t step,
                       st_grads_ready_fn ready, void *ready_ctx);
/* Gradient buffers (e->gslots) the backward pass of nodes [lo, hi) needs at
 * most, dy's slot 0 included (two for a chain). */
int st__net_grad_slots(const st_net *m, int lo, int hi);
/* floats[s] (s < st__net_grad_slots over every node) = per example, the
 * largest gradient slot s holds in a replica's backward (the model's input
 * gradient asked for or not): the choice of slot depends only on the graph
 * and that, so a slot of that size always suffices (graph.c). */
void st__net_grad_slot_floats(const st_net *m, size_t *floats);
/* The largest trainable floats of one layer of [lo, hi) (gscratch's size). */
size_t st__net_max_layer_params(const st_net *m, int lo, int hi);
/* True for Sequential's shape: node i calls layer i on node i-1's output. */
bool st__net_is_chain(const st_net *m);
/* True if some layer of the net is called by several nodes, or reads
 * another layer's variables (st_layer.tied: gradients summed as well). */
bool st__net_shares_layers(const st_net *m);
/* Per-example shape of tensor t. */
st_shape st__net_tensor_shape(const st_net *m, int t);
/* A cut before node k (a pipeline stage starting there): the number of
 * distinct tensors made before k and read from k on (*crossing: one of them,
 * the last found), or -1 when a layer has calls on both sides (a layer
 * reading a tied layer's variables, st_layer.tied, may sit on the other
 * side: the pipeline keeps the table in both stages, pipeline.h). */
int st__net_cut(const st_net *m, int k, int *crossing);
/* The nodes of layers [llo, hi): [*nlo, *nhi) (valid where st__net_cut at
 * the first node of llo and of lhi is 1). */
void st__net_layer_nodes(const st_net *m, int llo, int lhi, int *nlo, int *nhi);
/* Append a node calling layer `layer` on tensors in[0..n) (ST_ERR_NOMEM). */
st_status st__net_add_node(st_net *m, int layer, const int *in, int n);

/* Create a replica able to run batches of up to max_batch examples, with its
 * own context of backend be (device `index`). If params/state are NULL the
 * replica allocates its own copies (zeroed). */
st_status st__replica_create(const st_net *m, const st_backend *be, int index,
                             int max_batch, float *params, float *state,
                             st_replica **out);
void st__replica_destroy(st_replica *r); /* accepts NULL */
/* Grow buffers so a batch of n fits (no-op when it already does). */
st_status st__replica_reserve(const st_net *m, st_replica *r, int n);

/* evaluate / predict: make room for a forward-only pass (training false) of
 * n examples. Within the training buffers' batch nothing changes; beyond
 * it, the replica switches to buffers of the forward-only plan
 * (st__net_infer_offsets: activations freed after their last reader, one
 * cache shared by the nodes) sized for n, not the whole training set of
 * buffers. st__replica_reserve (any training use) switches back. */
st_status st__replica_reserve_infer(const st_net *m, st_replica *r, int n);
/* Back to the training buffers (a no-op when not switched), and release. */
void st__replica_infer_leave(st_replica *r);
void st__replica_infer_free(st_replica *r);

/* Forward over n examples of x [n, input]; returns the output [n, out]
 * (a replica buffer). `step` keys the dropout RNG. */
const float *st__replica_forward(const st_net *m, st_replica *r,
                                 const float *x, int n, bool training,
                                 int64_t step);
/* out [n, outputs] (what st__replica_forward returned) in host memory:
 * out itself on host backends, a copy on device backends. */
const float *st__replica_output_host(const st_net *m, st_replica *r, const float *out, int n);
/* On a device backend with a copy slot: out [n, outputs] copied (in the
 * context's order, no wait) into r->outkeep, returned, for the metrics to
 * read after backward (training reuses out's buffer during backward), so a
 * step waits for the device once, at its end. NULL elsewhere: read out now. */
const float *st__replica_keep_output(const st_net *m, st_replica *r, const float *out, int n);/* Loss on the last forward output against y, scaled by 1/global_batch, then
 * backward through every layer, writing r->grads. Returns the sum of the
 * per-example losses (unscaled), read after backward is under way (a device
 * backend then runs backward while the host waits for the losses). With
 * n == 0 the gradients are zero. */
double st__replica_loss_backward(const st_net *m, st_replica *r,
                                 const float *x, const float *y, int n,
                                 int64_t global_batch, int64_t step,
                                 st_grads_ready_fn ready, void *ready_ctx);
/* Backward from a given gradient of the outputs, dy [n, out] (a custom
 * loop's own loss; host memory, copied), through every layer: r->grads
 * (overwritten) and, when dx is not NULL, the gradient of the input x
 * [n, input] (one model input). Forward must have run on x. */
void st__replica_backward_dy(const st_net *m, st_replica *r, const float *x, const float *dy,
                             int n, int64_t step, float *dx);
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
/* Labels per example: for sparse losses the output's positions (its size
 * over its last axis: 1 for [classes], T for a language model's [T, vocab],
 * Keras's sparse cross-entropy over the last axis), else the output size. */
size_t st__net_label_size(const st_net *m);
/* Loss rows per example (sparse: the positions, else 1) and their width
 * (sparse: the last axis, else the output size). */
size_t st__net_loss_positions(const st_net *m);
int st__net_loss_cols(const st_net *m);
/* The loss of n examples' outputs out [n, out] against y [n, label size]
 * through be->loss: loss_rows[i] (i < n) = example i's loss (the mean over
 * its positions), dy (may be NULL) its gradient times scale / positions.
 * loss_rows holds n * st__net_loss_positions(m) floats (host-readable). */
void st__net_loss(const st_net *m, st_backend_ctx *ctx, int n, const float *out, const float *y,
                  float scale, float *loss_rows, float *dy);
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
/* Multiply loss[i] and the row dpred[i] (cols floats; either may be NULL) by the
 * class weight of example i's label, or its sample weight (y points into
 * m->sample_labels); a no-op without either. */
void st__net_apply_example_weights(const st_net *m, st_replica *r, const float *y, int n,
                                 int cols, float *loss, float *dpred);
/* Layers that check their input before a kernel reads it (Embedding's ids):
 * every node reading a model input checks it for x [n, input] (examples
 * first .. first + n - 1, named in the message). */
st_status st__net_check_inputs(const st_net *m, const float *x, int n, int64_t first);
/* True if some layer runs collectives (every replica must then run forward and
 * backward each step, with an empty slice too). */
bool st__net_uses_collectives(const st_net *m);
/* Initialise params and state from the net's init_seed (layer i, param p
 * draws from RNG stream st__layer_init_stream(i, p); a parameter with its own
 * seed, st_layer_set_init_seed, from (that seed, stream p)), on the host. */
void st__net_init_variables(const st_net *m, float *params, float *state);
/* The same for layers [lo, hi) only (the values st__net_init_variables gives them). */
void st__net_init_layers(const st_net *m, int lo, int hi, float *params, float *state);
/* The largest per-example activation size over input and all layers. */
size_t st__net_max_activation(const st_net *m);

/* ---- several outputs (net_outputs.c; m->n_outputs > 1, host memory) ---- */
/* Floats of output j, of its label (1 for a sparse loss), of a whole label
 * row (every output's; also for one output: 1 or the output size). */
size_t st__net_out_size(const st_net *m, int j);
size_t st__net_out_label_width(const st_net *m, int j);
size_t st__net_label_width(const st_net *m);
/* The replica's buffers for them (r->outcat, ylab, out_rows; a no-op for one
 * output), and their release. */
st_status st__replica_outputs_alloc(const st_net *m, st_replica *r, int n);
void st__replica_outputs_free(st_replica *r);
/* After forward: the outputs' concatenation [n, sum] (r->outcat). */
const float *st__replica_outputs_gather(const st_net *m, st_replica *r, int n);
/* Sum over examples of sum_j out_weight[j] * loss_j (labels y [n, label
 * width]); per-example values in r->loss_rows. With grads, output j's
 * gradient (scaled by scale * out_weight[j]) goes to r->gslots[j]. */
double st__replica_outputs_loss(const st_net *m, st_replica *r, const float *y, int n,
                                float scale, bool grads);
/* The outputs' gradients in r->gslots[j] into dy [n, sum] (host memory),
 * concatenated as the outputs are. */
void st__replica_outputs_grads_out(const st_net *m, st_replica *r, float *dy, int n);
/* A given gradient of the concatenated outputs dy [n, sum] into r->gslots[j]. */
void st__replica_outputs_scatter_dy(const st_net *m, st_replica *r, const float *dy, int n);
/* e's backward starts from the outputs' gradients in gslots[0..n_outputs). */
void st__exec_seed_outputs(const st_net *m, st_exec *e);
/* Per output j: loss[j] += the sum of its per-example losses (unweighted),
 * correct[j] / count[j] += its metric's numerator / denominator, for rows
 * of the concatenated pred against the label rows y (host memory). */
void st__net_outputs_metrics(const st_net *m, const float *pred, const float *y, int rows,
                             double *loss, int64_t *correct, int64_t *count);

/* ---- activation memory report (memplan.c): what the executor allocates
 * for training, and the forward-only plan evaluate / predict use ---- */
typedef struct st_memplan {
  int nnodes, batch;
  size_t activation_floats;      /* every node's output, [batch, out_k] summed */
  size_t train_activation_floats; /* what the replica allocates for them: own
                                    buffers for outputs some backward reads,
                                    shared slots for the others (memplan_train.c) */
  size_t cache_floats;           /* the layers' forward caches (BN's x-hat, ...) */
  int grad_slots;                /* st__net_grad_slots over every node */
  size_t grad_floats;            /* the replica's gradient buffers: batch x
                                    the slots' sizes (st__net_grad_slot_floats) */
  size_t grad_per_tensor_floats; /* one gradient buffer per tensor instead */
  size_t inference_peak_floats;  /* forward only, each activation (inputs
                                    included) freed after its last reader in
                                    the topological order */
  size_t infer_block_floats;     /* what evaluate / predict allocate beyond
                                    the training batch (replica_infer.c): the
                                    planned block of activations ... */
  size_t infer_cache_floats;     /* ... and the one cache the nodes share */
} st_memplan;
/* Where each node's output lives in a forward-only pass that frees every
 * activation after its last reader (the model's outputs kept to the end):
 * node k's output at off[k] * n floats of one buffer of *total * n floats
 * (off [nnodes], per example; first fit in node order). ST_ERR_NOMEM. */
st_status st__net_infer_offsets(const st_net *m, size_t *off, size_t *total);
/* Training: slot_of[k] (nnodes) = the shared slot holding node k's output,
 * or -1 for a buffer of its own (an output some backward reads, or a model
 * output); *nslots slots, slot s of sizes[s] (nnodes) floats per example
 * (memplan_train.c; st__net_transient_slots: *slot_floats = the largest).
 * ST_ERR_NOMEM. */
st_status st__net_transient_sizes(const st_net *m, int *slot_of, int *nslots, size_t *sizes);
st_status st__net_transient_slots(const st_net *m, int *slot_of, int *nslots,
                                  size_t *slot_floats);
/* Node output t shares a slot and is rebuilt by its producer (layer.h
 * rematerialize) before a backward that reads it; st__net_remat_floats: the
 * largest such output per example (0: none; the replica rebuilds them in
 * its first slot) (memplan_train.c). */
bool st__net_rematerialized(const st_net *m, int t);
size_t st__net_remat_floats(const st_net *m);
/* *floats = per example, the own buffers plus the slots. ST_ERR_NOMEM. */
st_status st__net_train_activation_floats(const st_net *m, size_t *floats);
/* The figures for net m at batch size `batch` into *out (zeroed first);
 * ST_ERR_INVALID for a NULL m, batch < 1 or a net without nodes. */
st_status st__net_memplan(const st_net *m, int batch, st_memplan *out);
/* What a replica training batches of n examples allocates on a host
 * backend (replica.c: st__replica_create, st__replica_reserve), counted
 * without allocating, in floats: *fixed its gradients [n_params] (and the
 * scratch of a shared layer's gradient), *batch the activations (own
 * buffers and transient slots), caches, gradient slots, the largest layer
 * workspace, the loss rows and the split inputs of several. Its variables
 * (borrowed or copied: the strategy's choice) are not counted. ST_ERR_INVALID
 * as st__net_memplan; ST_ERR_NOMEM. */
st_status st__replica_plan_floats(const st_net *m, int n, size_t *fixed, size_t *batch);

#endif
