/* Internal layer interface: the table every layer kind fills, and the per-call
 * arguments. A layer object holds configuration and build results only (shapes,
 * parameter specs, sizes); all tensors — parameters, gradients, activations,
 * caches — belong to the caller (one set per replica), so one built layer is
 * shared read-only by all replica threads.
 *
 * Adding a layer kind: write src/nn/layer_<kind>.c with a static st_layer_vtable
 * and a public constructor declared in include/strata/nn.h; add a gradient check
 * in tests/test_gradcheck.c; add its Keras class name to the JSON importer. */
#ifndef STRATA_NN_LAYER_H
#define STRATA_NN_LAYER_H

#include "backend/impl.h"
#include "strata/nn.h"

#define ST_LAYER_MAX_PARAMS 4
#define ST_NAME_MAX 64

typedef struct st_param_spec {
  char name[32];    /* "kernel", "bias", "gamma", "moving_mean", ... */
  st_shape shape;   /* full tensor shape, e.g. Dense kernel [in, units] */
  st_init init;
  bool trainable;   /* false: lives in the model's state buffer, no gradient */
  size_t offset;    /* set by the model: floats from the start of the params
                       buffer (trainable) or of the state buffer */
} st_param_spec;

/* Arguments of one forward or backward call over a batch. */
typedef struct st_layer_call {
  const st_backend *be;
  st_backend_ctx *ctx; /* be's context of the replica (first argument of every slot) */
  int batch;           /* examples in this call; may be 0 */
  bool training;
  const float *x;      /* [batch, in_shape] */
  float *y;            /* [batch, out_shape]; forward writes */
  const float *dy;     /* [batch, out_shape]; backward reads (may be clobbered
                          only if dy_writable) */
  bool dy_writable;
  float *dx;           /* [batch, in_shape]; backward writes; NULL = not needed */
  float *w[ST_LAYER_MAX_PARAMS];   /* parameter i (trainable or state) */
  float *dw[ST_LAYER_MAX_PARAMS];  /* gradient of trainable param i (overwrite) */
  float *cache;        /* [batch * cache_per_example] kept from forward */
  float *workspace;    /* scratch of workspace_floats(batch) floats */
  uint64_t seed;       /* RNG key for this call (dropout): the model derives it */
  uint64_t stream;     /*   from (seed, step, replica, layer) */
  /* Synchronized BatchNorm: all-reduce (sum) n floats across replicas, or NULL. */
  void (*all_reduce_sum)(void *ctx, float *buf, size_t n);
  void *all_reduce_ctx;
  int64_t global_batch; /* examples across all replicas (for sync BN) */
} st_layer_call;

typedef struct st_layer_vtable {
  const char *class_name; /* Keras class name: "Dense", "Conv2D", ... */
  const char *base_name;  /* automatic name stem: "dense", "conv2d", ... */
  /* Compute l->out_shape from l->in_shape, declare params with
   * st__layer_add_param, set cache_per_example; return ST_ERR_INVALID with a
   * message naming the layer and shape when the input does not fit. */
  st_status (*build)(st_layer *l);
  /* Floats of scratch needed for a call with `batch` examples. NULL = 0. */
  size_t (*workspace_floats)(const st_layer *l, int batch);
  void (*forward)(const st_layer *l, st_layer_call *c);
  void (*backward)(const st_layer *l, st_layer_call *c);
  void (*destroy_config)(st_layer *l); /* NULL = free(l->config) */
} st_layer_vtable;

struct st_layer {
  const st_layer_vtable *vt;
  char name[ST_NAME_MAX];
  bool named_by_user;
  st_shape in_shape, out_shape; /* set before/by build */
  int nparams;
  st_param_spec params[ST_LAYER_MAX_PARAMS];
  size_t cache_per_example;     /* floats */
  st_activation out_activation; /* applied last by this layer (Dense, Conv2D,
                                   Activation), else LINEAR */
  /* ReLU + MaxPooling2D backward in one pass over the activation: a layer
   * with folds_input_relu (MaxPooling2D) after one ending in ReLU gets
   * input_relu_folded (its backward also applies ReLU's derivative) and the
   * layer before gets act_grad_folded (its backward takes dy as dz). Set by
   * st_model_add. */
  bool folds_input_relu, input_relu_folded, act_grad_folded;
  bool uses_collectives;        /* forward/backward call all_reduce_sum (sync
                                   BatchNorm): every replica must run them, even
                                   on an empty slice */
  void *config;                 /* layer-kind options, owned */
  bool in_model;                /* owned by a model (st_model_add): only the
                                   model frees it (st__layer_free) */
};

/* Frees l whoever owns it (st_layer_destroy ignores a layer in a model). */
void st__layer_free(st_layer *l);

/* Allocate a layer with a copy of config (config_size bytes) into *out (NULL
 * on failure, error returned). name may be NULL. */
st_status st__layer_new(const st_layer_vtable *vt, const void *config,
                        size_t config_size, const char *name, st_layer **out);
/* Declare parameter i (in order); returns its index. */
int st__layer_add_param(st_layer *l, const char *name, st_shape shape,
                        st_init init, bool trainable);
/* The activation whose derivative l's backward applies: act (its own), or
 * linear when the next layer applies it (act_grad_folded). */
static inline st_activation st__layer_grad_act(const st_layer *l,
                                               st_activation act) {
  return l->act_grad_folded ? ST_ACT_LINEAR : act;
}

/* Build: set in_shape and call vt->build. */
st_status st__layer_build(st_layer *l, st_shape in);

/* Fill n floats of a parameter with its initializer; fan_in/fan_out are derived
 * from the shape as Keras does (Dense [in,out]; Conv [kh,kw,in,out]). */
void st__init_fill(st_init init, st_shape shape, float *dst, st_rng *rng);

/* Parse an activation/padding from a layer config etc. live in their files. */
#endif
