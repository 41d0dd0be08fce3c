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
  ST_INIT_RANDOM_UNIFORM,     /* uniform in [-0.05, 0.05] (Keras RandomUniform
                                 defaults; Embedding's default) */
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
/* Parameter `param` of l (in the order of its weights: Dense and Conv2D's
 * kernel 0, bias 1) draws its initial values from (seed, param) instead of
 * the model's seed and the layer's place (Keras's initializer seed=: the
 * same values in any model, in any place). Used when the variables are
 * initialised (the first st_model_compile); a later call changes nothing.
 * ST_ERR_INVALID for a NULL l or param outside [0, 8). */
st_status st_layer_set_init_seed(st_layer *l, int param, uint64_t seed);
/* The activation the layer applies last (Dense, Conv2D, Activation), else
 * linear: tells whether a model outputs logits or probabilities. */
st_activation st_layer_output_activation(const st_layer *l);

typedef enum st_padding {
  ST_PAD_VALID = 0,
  ST_PAD_SAME,
  ST_PAD_CAUSAL /* Conv1D only: kernel_size - 1 zeros on the left */
} st_padding;

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

/* -- issue 28, layers-a: global pooling, ZeroPadding2D, ReLU, LeakyReLU -- */
/* GlobalAveragePooling2D / GlobalMaxPooling2D over [h, w, c] -> [c], and
 * GlobalAveragePooling1D / GlobalMaxPooling1D over [steps, c] -> [c] (Keras
 * keepdims=False). Max pooling's gradient is shared by tied maxima, as in
 * TensorFlow. ST_ERR_INVALID naming out when it is NULL. */
st_status st_global_avgpool2d(st_layer **out);
st_status st_global_maxpool2d(st_layer **out);
st_status st_global_avgpool1d(st_layer **out);
st_status st_global_maxpool1d(st_layer **out);

typedef struct st_zeropad2d_options {
  int top, bottom, left, right; /* zero rows / columns added, >= 0 */
  const char *name;
} st_zeropad2d_options;
/* ZeroPadding2D on [h, w, c] (Keras default padding 1 on every side);
 * ST_ERR_INVALID naming the side for a negative padding, or out when NULL. */
st_zeropad2d_options st_zeropad2d_default_options(int pad);
st_status st_zeropad2d_ex(st_zeropad2d_options o, st_layer **out);
st_status st_zeropad2d(int pad, st_layer **out);

typedef struct st_relu_options {
  float max_value;      /* INFINITY (the default) = none (Keras None); else >= 0 */
  float negative_slope; /* >= 0, default 0 */
  float threshold;      /* >= 0, default 0 */
  const char *name;
} st_relu_options;
/* ReLU as Keras's layer: y = x for threshold < x < max_value, max_value above
 * it, negative_slope * (x - threshold) below the threshold (ReLU(max_value=6)
 * is relu6). LeakyReLU(negative_slope): x >= 0 ? x : negative_slope * x
 * (Keras 3 default 0.3). ST_ERR_INVALID naming the option when one is
 * negative or NaN, or out when NULL. */
st_relu_options st_relu_default_options(void);
st_status st_relu_ex(st_relu_options o, st_layer **out);
st_status st_leaky_relu(float negative_slope, st_layer **out);
/* -- end of issue 28, layers-a -- */
/* ---- graphs of layers (Keras's functional API) ---------------------------
 * A node is a symbolic tensor (Keras's KerasTensor): a model input made by
 * st_input, or the output of calling a layer on nodes (st_layer_call). The
 * first call builds the layer for its inputs' shapes; calling it again (on
 * inputs of the same shapes) shares its weights. st_functional_create
 * (strata/train.h) makes a model of the graph between its inputs and
 * outputs. A layer's call nodes belong to the layer (freed with it); an
 * input node belongs to the caller until a model takes it. */
typedef struct st_node st_node;
/* A model input of per-example shape `shape` (rank 1..ST_MAX_RANK, dims > 0);
 * name may be NULL (automatic: "input_1", ...). ST_ERR_INVALID naming the bad
 * argument, ST_ERR_NOMEM. */
st_status st_input(st_shape shape, const char *name, st_node **out);
/* Calls l on inputs[0..n) (n >= 1; most layers take 1, Add/Concatenate
 * several): writes the output node to *out. ST_ERR_INVALID (message names the
 * layer, its inputs and their shapes) when the inputs do not fit the layer,
 * the layer was built for other shapes, or it already belongs to a model. */
st_status st_layer_call(st_layer *l, st_node *const *inputs, int n, st_node **out);
/* The node's per-example shape (empty shape for NULL). */
st_shape st_node_shape(const st_node *t);
/* The layer that made the node (NULL for an input or NULL node). */
const st_layer *st_node_layer(const st_node *t);
/* Frees an input node no model took (accepts NULL); nodes made by a layer
 * call and inputs taken by a model are freed with their owner (ignored here). */
void st_node_destroy(st_node *t);
/* ---- Conv1D, DepthwiseConv2D, Embedding, LayerNormalization (issue 28) ---- */
typedef struct st_conv1d_options {
  int filters;
  int kernel_size;
  int strides;
  st_padding padding; /* valid, same or causal */
  st_activation activation;
  bool use_bias;
  st_init kernel_init, bias_init;
  const char *name;
} st_conv1d_options;
/* Conv1D on channels-last sequences [steps, channels]; kernel [kernel_size,
 * channels, filters] (Keras layout). Keras defaults: stride 1, valid padding,
 * linear, bias, glorot_uniform kernel, zero bias. ST_ERR_INVALID naming the
 * option for non-positive filters, kernel_size or strides, an unknown padding,
 * activation or initializer, or a NULL out. */
st_conv1d_options st_conv1d_default_options(int filters, int kernel_size);
st_status st_conv1d_ex(st_conv1d_options o, st_layer **out);

typedef struct st_depthwise_conv2d_options {
  int kh, kw;
  int sh, sw;
  int depth_multiplier; /* output channels = input channels * depth_multiplier */
  st_padding padding;   /* valid or same */
  st_activation activation;
  bool use_bias;
  st_init depthwise_init, bias_init;
  const char *name;
} st_depthwise_conv2d_options;
/* DepthwiseConv2D on [h, w, c]: each input channel convolved with its own
 * depth_multiplier filters; depthwise_kernel [kh, kw, c, depth_multiplier],
 * output channel ci*depth_multiplier + m (Keras layout), bias [c *
 * depth_multiplier]. Keras defaults: stride 1, valid, multiplier 1, linear,
 * bias, glorot_uniform, zeros. ST_ERR_INVALID naming the option for a
 * non-positive kernel, stride or multiplier, a padding other than valid/same,
 * an unknown activation or initializer, or a NULL out. */
st_depthwise_conv2d_options st_depthwise_conv2d_default_options(int kh, int kw);
st_status st_depthwise_conv2d_ex(st_depthwise_conv2d_options o, st_layer **out);

typedef struct st_embedding_options {
  int input_dim;  /* vocabulary size: ids in [0, input_dim) */
  int output_dim; /* vector size */
  st_init embeddings_init; /* random_uniform (Keras default) */
  const char *name;
} st_embedding_options;
/* Embedding: input [seq] of integer ids stored as floats, output [seq,
 * output_dim] (rows of embeddings [input_dim, output_dim]). An id that is not
 * an integer in [0, input_dim) is refused before use, naming the id and its
 * position, when the model checks its inputs; the input has no gradient.
 * ST_ERR_INVALID naming the option for a non-positive input_dim or
 * output_dim, an unknown initializer, or a NULL out. */
st_embedding_options st_embedding_default_options(int input_dim, int output_dim);
st_status st_embedding_ex(st_embedding_options o, st_layer **out);
st_status st_embedding(int input_dim, int output_dim, st_layer **out);

typedef struct st_position_embedding_options {
  int sequence_length; /* the longest sequence: positions [0, sequence_length) */
  st_init initializer; /* glorot_uniform (keras_hub default) */
  const char *name;
} st_position_embedding_options;
/* PositionEmbedding (keras_hub): input [T, d] (its values are not read),
 * output [T, d] = embeddings[0:T] (embeddings [sequence_length, d]), to be
 * added to the token embeddings. ST_ERR_INVALID for a non-positive
 * sequence_length, an unknown initializer, a NULL out; when built, for an
 * input that is not [T, d] with T <= sequence_length. */
st_position_embedding_options st_position_embedding_default_options(int sequence_length);
st_status st_position_embedding_ex(st_position_embedding_options o, st_layer **out);
st_status st_position_embedding(int sequence_length, st_layer **out);
/* ReversibleEmbedding's reverse call (keras_hub, tie_weights=True): a
 * language model's output head tied to the token embedding. Input [..., d],
 * output [..., vocab] = x . embeddings^T, where embeddings [vocab, d] is the
 * table of `embedding` (an Embedding layer, borrowed: call it first, in the
 * same model). One variable: the gradients of both uses are summed. The new
 * layer has no variable of its own. ST_ERR_INVALID for a NULL argument or a
 * layer that is not an Embedding; when built, for an input whose last axis
 * is not the embedding width. */
st_status st_reversible_embedding(st_layer *embedding, st_layer **out);

typedef struct st_layernorm_options {
  float epsilon; /* 1e-3 (Keras) */
  bool center, scale;
  const char *name;
} st_layernorm_options;
/* LayerNormalization over the last axis of each example's rows: y = gamma
 * (x - mean) / sqrt(var + epsilon) + beta, gamma and beta [last dim] (gamma
 * first, as Keras). ST_ERR_INVALID naming epsilon when it is not positive and
 * finite, or out when NULL. */
st_layernorm_options st_layernorm_default_options(void);
st_status st_layernorm_ex(st_layernorm_options o, st_layer **out);
st_status st_layernorm(st_layer **out);
/* ---- merge layers and attention (several inputs; called on graph tensors,
 * issue 28) ---- */
/* Add, Subtract (exactly 2 inputs: x0 - x1), Multiply (element-wise) of 2 to
 * 8 inputs of one shape; Concatenate along `axis` (Keras counting: -1 = the
 * last axis, 1 = the first axis after the batch; the batch axis 0 is refused
 * when the layer is built), shapes equal except on that axis. A shape
 * mismatch is ST_ERR_INVALID naming the layer and both shapes when built. */
st_status st_add(st_layer **out);
st_status st_subtract(st_layer **out);
st_status st_multiply(st_layer **out);
st_status st_concatenate(int axis, st_layer **out);

typedef struct st_mha_options {
  int num_heads;        /* > 0 */
  int key_dim;          /* > 0: size of each query/key head */
  int value_dim;        /* size of each value head; 0 = key_dim */
  float dropout;        /* [0, 1): on the attention probabilities, in fit only */
  bool use_bias;        /* true */
  int output_dim;       /* Keras output_shape; 0 = the query's last dimension */
  bool use_causal_mask; /* query i attends to keys j <= i (Keras passes it when
                           calling the layer; Strata keeps it as an option) */
  st_init kernel_init, bias_init; /* glorot_uniform, zeros */
  const char *name;
} st_mha_options;
/* MultiHeadAttention (Keras): inputs query [Tq, dq], value [Tv, dv] and an
 * optional key [Tv, dk] (default: the value), in Keras's call order (query,
 * value, key); output [Tq, output_dim]. Parameters in Keras's order and
 * layouts: query/kernel [dq, heads, key_dim], query/bias [heads, key_dim],
 * key/kernel [dk, heads, key_dim], key/bias, value/kernel [dv, heads,
 * value_dim], value/bias, attention_output/kernel [heads, value_dim, out],
 * attention_output/bias [out] (the biases only with use_bias). Scores are
 * scaled by 1/sqrt(key_dim). ST_ERR_INVALID for heads or key_dim <= 0, a
 * negative value_dim or output_dim, dropout outside [0, 1). */
st_mha_options st_multi_head_attention_default_options(int num_heads, int key_dim);
st_status st_multi_head_attention_ex(st_mha_options o, st_layer **out);
st_status st_multi_head_attention(int num_heads, int key_dim, st_layer **out);
/* ---- end of merge layers and attention ---- */

/* A layer's options, as Keras's layer.get_config(): the member of its class
 * (st_layer_class) holds what its constructor was given (name fields NULL;
 * st_layer_name says the name; pool strides 0 = the pool size; Reshape's
 * target as built), every other member is zero. Flatten and the global
 * poolings have none. */
typedef struct st_layer_options {
  st_dense_options dense;         /* Dense */
  st_conv2d_options conv2d;       /* Conv2D */
  st_pool2d_options pool2d;       /* MaxPooling2D, AveragePooling2D */
  st_batchnorm_options batchnorm; /* BatchNormalization */
  float dropout_rate;             /* Dropout */
  st_activation activation;       /* Activation (ReLU with its defaults and Softmax
                                     import as it) */
  st_shape target_shape;          /* Reshape */
  st_zeropad2d_options zeropad2d;  /* ZeroPadding2D (layers-a) */
  st_relu_options relu;            /* ReLU, LeakyReLU (layers-a) */
  /* issue 28, helper B */
  st_conv1d_options conv1d;       /* Conv1D */
  st_depthwise_conv2d_options depthwise; /* DepthwiseConv2D */
  st_embedding_options embedding; /* Embedding */
  st_layernorm_options layernorm; /* LayerNormalization */
  st_position_embedding_options position_embedding; /* PositionEmbedding */
  int concat_axis;                /* Concatenate (as given: -1, 1, 2, ...) */
  st_mha_options mha;             /* MultiHeadAttention */
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
  /* cosine with warmup (Keras CosineDecay's warmup_steps / warmup_target;
   * warmup_steps 0 = none): lr rises linearly from initial at step 0 to
   * warmup_target at warmup_steps, then decays from warmup_target over
   * decay_steps to alpha * warmup_target */
  int64_t warmup_steps;
  float warmup_target;
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
  /* Adam/AdamW as torch.optim.Adam(W) (false: Keras's form): epsilon added
   * to sqrt(v_hat) = sqrt(v / (1 - beta2^t)), Keras adds it to sqrt(v)
   * (the same update with epsilon * sqrt(1 - beta2^t)). With weight_decay
   * (p -= lr * wd * p first, decoupled, as both) this is torch.optim.AdamW. */
  bool torch_form;
  /* > 0: scale the gradients so that their global L2 norm is at most this
   * (Keras global_clipnorm, torch.nn.utils.clip_grad_norm_) before the
   * update; the strategy computes the norm over every gradient
   * (st_optimizer_clip_factor) */
  float global_clipnorm;
} st_optimizer_options;
/* Keras defaults for that optimizer (lr 0.001 for Adam/AdamW/RMSprop, 0.01 SGD). */
st_optimizer_options st_optimizer_default_options(st_optimizer_kind kind);
const char *st_optimizer_name(st_optimizer_kind k);
st_status st_optimizer_parse(const char *name, st_optimizer_kind *out);
/* The factor global_clipnorm asks for, given the sum of the squares of every
 * gradient: min(1, clipnorm / norm) (torch: clipnorm / (norm + 1e-6)); 1 when
 * clipping is off. */
float st_optimizer_clip_factor(const st_optimizer_options *o, double sum_squares);
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
