/* Strata nn layer: layers, initializers, optimizers, learning-rate
 * schedules and metrics — the pieces a Sequential model is made of. The model
 * itself (compile / fit / evaluate / predict) is in strata/train.h. */
#ifndef STRATA_NN_H
#define STRATA_NN_H

#include "strata/backend.h" /* st_loss_kind, st_activation; st_shape via base.h */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- initializers (Keras names) ---- */
typedef enum st_init {
  ST_INIT_GLOROT_UNIFORM = 0, /* Keras default for kernels */
  ST_INIT_HE_NORMAL,          /* truncated normal, stddev sqrt(2/fan_in) */
  ST_INIT_ZEROS,
  ST_INIT_ONES,
  ST_INIT_COUNT
} st_init;
/* An initializer's Keras name ("glorot_uniform"), and the initializer a name
 * gives (ST_ERR_INVALID naming it when unknown). */
const char *st_init_name(st_init i);
st_status st_init_parse(const char *name, st_init *out);

/* ---- layers ------------------------------------------------------------- */
/* Layers are created unbuilt: each constructor below writes the new layer to
 * *out and returns ST_OK, or returns ST_ERR_INVALID (an option out of range,
 * naming it) or ST_ERR_NOMEM with *out = NULL. st_model_add takes ownership
 * and builds the layer when the input shape is known; a layer belongs to one
 * model (adding it to a second is refused). The getters below return "", an
 * empty shape or 0 for NULL. */
typedef struct st_layer st_layer;
/* Frees a layer that no model owns (accepts NULL); a layer added to a model
 * is the model's: destroying it here is ignored. */
void st_layer_destroy(st_layer *l);
const char *st_layer_name(const st_layer *l);       /* "dense_1" */
const char *st_layer_class(const st_layer *l);      /* "Dense" */
/* Per-example output shape (set once the layer is built by st_model_add). */
st_shape st_layer_output_shape(const st_layer *l);
size_t st_layer_param_count(const st_layer *l);     /* trainable + not */
/* The activation the layer applies last (Dense, Conv2D, Activation), else
 * linear: tells whether a model outputs logits or probabilities. */
st_activation st_layer_output_activation(const st_layer *l);

typedef enum st_padding { ST_PAD_VALID = 0, ST_PAD_SAME } st_padding;

typedef struct st_dense_options {
  int units;
  st_activation activation;
  bool use_bias;
  st_init kernel_init, bias_init;
  const char *name; /* NULL: automatic "dense", "dense_1", ... */
} st_dense_options;
/* Dense (Keras defaults: linear, bias, glorot_uniform kernel, zero bias);
 * ST_ERR_INVALID unless units > 0. */
st_dense_options st_dense_default_options(int units);
st_status st_dense_ex(st_dense_options o, st_layer **out);
st_status st_dense(int units, st_activation act, st_layer **out);

typedef struct st_conv2d_options {
  int filters;
  int kh, kw;
  int sh, sw;
  st_padding padding;
  st_activation activation;
  bool use_bias;
  st_init kernel_init, bias_init;
  const char *name;
} st_conv2d_options;
/* Conv2D on channels-last input [h, w, c] (stride 1, valid padding, Keras
 * defaults); ST_ERR_INVALID for non-positive filters, kernel or strides. */
st_conv2d_options st_conv2d_default_options(int filters, int kh, int kw);
st_status st_conv2d_ex(st_conv2d_options o, st_layer **out);
st_status st_conv2d(int filters, int k, st_activation act, st_layer **out);

typedef struct st_pool2d_options {
  int ph, pw;
  int sh, sw; /* 0 = pool size (Keras default strides=None) */
  st_padding padding;
  const char *name;
} st_pool2d_options;
/* MaxPooling2D / AveragePooling2D over [h, w, c]; ST_ERR_INVALID for a
 * non-positive pool size or stride. */
st_pool2d_options st_pool2d_default_options(int pool);
st_status st_maxpool2d_ex(st_pool2d_options o, st_layer **out);
st_status st_avgpool2d_ex(st_pool2d_options o, st_layer **out);
st_status st_maxpool2d(int pool, st_layer **out);
st_status st_avgpool2d(int pool, st_layer **out);

/* Flatten; Dropout (rate in [0, 1), active in fit only); Activation. */
st_status st_flatten(st_layer **out);
st_status st_dropout(float rate, st_layer **out);
st_status st_activation_layer(st_activation act, st_layer **out);
/* Reshape to a target per-example shape with the same size. */
st_status st_reshape(st_shape target, st_layer **out);

typedef struct st_batchnorm_options {
  float momentum; /* 0.99 (Keras) */
  float epsilon;  /* 1e-3 (Keras) */
  bool center, scale;
  bool synchronized; /* all-reduce batch statistics across replicas */
  const char *name;
} st_batchnorm_options;
/* BatchNormalization over the last axis (moving statistics are state, not
 * trained; averaged across replicas after each step). */
st_batchnorm_options st_batchnorm_default_options(void);
st_status st_batchnorm_ex(st_batchnorm_options o, st_layer **out);
st_status st_batchnorm(st_layer **out);

/* A layer's options, as Keras's layer.get_config(): the member of its class
 * (st_layer_class) holds what its constructor was given (name fields NULL;
 * st_layer_name says the name; pool strides 0 = the pool size; Reshape's
 * target as built), every other member is zero. Flatten has none. */
typedef struct st_layer_options {
  st_dense_options dense;         /* Dense */
  st_conv2d_options conv2d;       /* Conv2D */
  st_pool2d_options pool2d;       /* MaxPooling2D, AveragePooling2D */
  st_batchnorm_options batchnorm; /* BatchNormalization */
  float dropout_rate;             /* Dropout */
  st_activation activation;       /* Activation (ReLU and Softmax import as it) */
  st_shape target_shape;          /* Reshape */
} st_layer_options;
/* ST_ERR_INVALID naming the argument for a NULL l or out. Any thread. */
st_status st_layer_get_options(const st_layer *l, st_layer_options *out);

/* ---- learning-rate schedules ---- */
typedef enum st_schedule_kind {
  ST_SCHEDULE_CONSTANT = 0,
  ST_SCHEDULE_EXPONENTIAL, /* lr * rate^(step/decay_steps) (staircase option) */
  ST_SCHEDULE_COSINE,      /* Keras CosineDecay(initial, decay_steps, alpha) */
  ST_SCHEDULE_COUNT
} st_schedule_kind;
typedef struct st_schedule {
  st_schedule_kind kind;
  float initial;
  int64_t decay_steps;
  float decay_rate; /* exponential */
  bool staircase;   /* exponential */
  float alpha;      /* cosine: final fraction of initial */
} st_schedule;
/* A constant learning rate lr. */
st_schedule st_schedule_constant(float lr);
/* Learning rate at optimizer step `step` (0-based count of applied updates). */
float st_schedule_lr(const st_schedule *s, int64_t step);
/* ST_OK when s can only give finite positive learning rates, else
 * ST_ERR_INVALID naming the field: kind out of range, initial not finite and
 * > 0, decay_steps negative, (exponential) decay_rate not finite and > 0,
 * (cosine) alpha outside [0, 1]. st_model_compile and st_ps_train check
 * their optimizer's schedule with it. */
st_status st_schedule_check(const st_schedule *s);

/* ---- optimizers ---- */
typedef enum st_optimizer_kind {
  ST_OPT_SGD = 0,
  ST_OPT_ADAM,
  ST_OPT_ADAMW,
  ST_OPT_RMSPROP,
  ST_OPT_COUNT
} st_optimizer_kind;
typedef struct st_optimizer_options {
  st_optimizer_kind kind;
  st_schedule lr;
  float momentum;     /* SGD, RMSprop (default 0) */
  bool nesterov;      /* SGD */
  float beta1, beta2; /* Adam: 0.9, 0.999 */
  float epsilon;      /* Adam 1e-7, RMSprop 1e-7 (Keras) */
  float rho;          /* RMSprop 0.9 */
  float weight_decay; /* AdamW 0.004 (Keras default) */
} st_optimizer_options;
/* Keras defaults for that optimizer (lr 0.001 for Adam/AdamW/RMSprop, 0.01 SGD). */
st_optimizer_options st_optimizer_default_options(st_optimizer_kind kind);
const char *st_optimizer_name(st_optimizer_kind k);
st_status st_optimizer_parse(const char *name, st_optimizer_kind *out);
/* Number of slot buffers (each the size of the parameters) the optimizer keeps. */
int st_optimizer_slot_count(const st_optimizer_options *o);
/* Apply one update to n parameters with the kernels of ctx's backend (the
 * context of the replica or model that owns the buffers). slots[i] are the
 * slot buffers (slots may be NULL when the optimizer keeps none); step is
 * the 0-based number of updates applied before this one.
 * Any thread that may use ctx. */
void st_optimizer_apply(const st_optimizer_options *o, st_backend_ctx *ctx,
                        int64_t step, size_t n, float *params,
                        const float *grads, float **slots);

/* ---- metrics ---- */
typedef enum st_metric_kind {
  ST_METRIC_ACCURACY = 0,           /* resolved by the loss, as Keras does */
  ST_METRIC_SPARSE_CATEGORICAL_ACCURACY,
  ST_METRIC_CATEGORICAL_ACCURACY,
  ST_METRIC_BINARY_ACCURACY,
  ST_METRIC_COUNT
} st_metric_kind;
/* Count of correct predictions among rows of pred [rows, cols] against y.
 * Binary accuracy counts elements (denominator rows*cols); the others count
 * rows. */
int64_t st_metric_correct(st_metric_kind m, st_loss_kind loss, int rows,
                          int cols, const float *pred, const float *y);

#ifdef __cplusplus
}
#endif
#endif
