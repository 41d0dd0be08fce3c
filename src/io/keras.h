/* Internal: the Keras JSON importer's shared pieces. keras_json.c reads the file,
 * checks the layout and builds the model; keras_layers.c turns one layer's
 * config into a validated st__keras_layer (no layer is created there, nothing
 * is allocated in proportion to a claimed size). Not thread-safe per call
 * beyond the per-thread error message; no global state. */
#ifndef STRATA_IO_KERAS_H
#define STRATA_IO_KERAS_H

#include <jansson.h>

#include "nn/layer.h"
#include "strata/train.h"

#define ST__KERAS_MAX_FILE (16u << 20)     /* bytes */
#define ST__KERAS_MAX_DEPTH 64             /* JSON nesting */
#define ST__KERAS_MAX_LAYERS 10000
#define ST__KERAS_MAX_UNITS (1 << 20)      /* units, filters */
#define ST__KERAS_MAX_KERNEL 1024          /* kernel, pool and stride sizes */
#define ST__KERAS_MAX_FLOATS (1 << 30)     /* per-example sizes, per-layer params */

typedef enum st__keras_kind {
  ST__K_INPUT = 0,
  ST__K_DENSE,
  ST__K_CONV2D,
  ST__K_MAXPOOL,
  ST__K_AVGPOOL,
  ST__K_FLATTEN,
  ST__K_DROPOUT,
  ST__K_BATCHNORM,
  ST__K_ACTIVATION, /* Activation, ReLU, Softmax */
  ST__K_RESHAPE,
  /* issue 28, layers-a */
  ST__K_GLOBAL_AVG2D,
  ST__K_GLOBAL_MAX2D,
  ST__K_GLOBAL_AVG1D,
  ST__K_GLOBAL_MAX1D,
  ST__K_ZEROPAD2D,
  ST__K_RELU,       /* ReLU other than its defaults (those import as Activation) */
  ST__K_LEAKY_RELU,
  /* end of layers-a */
  /* issue 28, helper B */
  ST__K_CONV1D,
  ST__K_DEPTHWISE,
  ST__K_EMBEDDING,
  ST__K_LAYERNORM,
  /* merge layers and attention (several inputs: functional graphs only) */
  ST__K_ADD,
  ST__K_SUBTRACT,
  ST__K_MULTIPLY,
  ST__K_CONCATENATE,
  ST__K_MHA, /* MultiHeadAttention; u.mha.use_causal_mask comes from the call's
                kwargs in Keras (the graph importer sets it); a "use_causal_mask"
                config key (Strata's own) sets it too */
  /* end of merge layers and attention */
  ST__K_POSITION_EMBEDDING, /* keras_hub PositionEmbedding (issue 31) */
  ST__K_REVERSIBLE_EMBEDDING, /* Strata's tied head, config {"embedding": NAME}
                                 (keras_hub's own, one layer called both ways,
                                 is refused); functional graphs only */
  ST__K_COUNT
} st__keras_kind;

/* One validated layer config. Option structs' name fields are NULL here; the
 * builder points them at `name`. */
typedef struct st__keras_layer {
  st__keras_kind kind;
  const char *cls;        /* Keras class name (static string) */
  char name[ST_NAME_MAX]; /* "" = automatic */
  bool has_input;         /* batch_input_shape / batch_shape was given */
  st_shape input;         /* per example (batch dimension dropped) */
  int axis;               /* BatchNormalization / Softmax / LayerNormalization axis as given: -1 or
                             an index into the batch shape (checked later) */
  int target_rank;        /* Reshape: target_shape, one entry may be -1 */
  int target[ST_MAX_RANK];
  bool causal_mask;       /* functional call's use_causal_mask (attention) */
  char tied[ST_NAME_MAX]; /* ReversibleEmbedding: the Embedding layer's name */
  union {
    st_dense_options dense;
    st_conv2d_options conv;
    st_pool2d_options pool;
    st_batchnorm_options bn;
    float rate;           /* Dropout */
    st_activation act;    /* Activation, ReLU, Softmax */
    st_zeropad2d_options zeropad; /* ZeroPadding2D */
    st_relu_options relu; /* ReLU (not its defaults), LeakyReLU */
    st_conv1d_options conv1d;
    st_depthwise_conv2d_options dw;
    st_embedding_options emb;
    st_layernorm_options ln;
    int concat_axis;      /* Concatenate (Keras counting, as given) */
    st_mha_options mha;   /* MultiHeadAttention */
    st_position_embedding_options pos; /* PositionEmbedding */
  } u;
} st__keras_layer;

/* Where an error is: file, layer position in the JSON "layers" array (-1 =
 * not in a layer), class and name (both already made printable). */
typedef struct st__keras_ctx {
  const char *file;
  int index;
  char cls[48];
  char name[ST_NAME_MAX + 8];
} st__keras_ctx;

/* ST_ERR_FORMAT with "file: layer i ('name', Class): " + message. */
st_status st__keras_error(const st__keras_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A JSON value as short printable text ("[2, 2]", "\"same\""), truncated. */
const char *st__keras_show(const json_t *v, char *buf, size_t n);
/* s with non-printable bytes replaced by '?' and truncated to n-1 bytes. */
const char *st__keras_clean(const char *s, char *buf, size_t n);
/* A batch shape [null|n, d1, ..., dk] (k in 1..4) into its per-example shape. */
st_status st__keras_shape(const st__keras_ctx *c, const char *key,
                          const json_t *v, st_shape *out);
/* Option readers: cfg[key] validated, or the default when absent. Errors name
 * the key and show the value. */
st_status st__keras_int(const st__keras_ctx *c, const json_t *cfg, const char *key,
                        long long lo, long long hi, int def, bool required, int *out);
/* An int or [a, b] (null = 0, 0 when null_ok, e.g. pooling strides). */
st_status st__keras_pair(const st__keras_ctx *c, const json_t *cfg, const char *key,
                         int lo, int hi, int def, bool null_ok, int out[2]);
/* Absent, 1 or [1, ..., 1] (dilation_rate, groups); else "not supported". */
st_status st__keras_ones(const st__keras_ctx *c, const json_t *cfg, const char *key);
st_status st__keras_bool(const st__keras_ctx *c, const json_t *cfg, const char *key,
                         bool def, bool *out);
/* Absent or false (sparse, ragged, renorm, ...). */
st_status st__keras_false(const st__keras_ctx *c, const json_t *cfg, const char *key);
/* Absent or null (regularizers, constraints, noise_shape, ...). */
st_status st__keras_null(const st__keras_ctx *c, const json_t *cfg, const char *key);
/* A number in [lo, hi]. */
st_status st__keras_float(const st__keras_ctx *c, const json_t *cfg, const char *key,
                          double lo, double hi, double def, float *out);
st_status st__keras_padding(const st__keras_ctx *c, const json_t *cfg, st_padding *out);
/* data_format absent, null or "channels_last". */
st_status st__keras_data_format(const st__keras_ctx *c, const json_t *cfg);
/* "relu", ... (absent or null = linear). */
st_status st__keras_activation(const st__keras_ctx *c, const json_t *cfg,
                               const char *key, st_activation *out);
/* "glorot_uniform", {"class_name": "GlorotUniform", "config": {"seed": null}},
 * or the Keras 3 form with "module"; seeds are accepted and ignored (Strata
 * seeds every initializer from the model seed). */
st_status st__keras_init(const st__keras_ctx *c, const json_t *cfg, const char *key,
                         st_init def, st_init *out);
/* dtype absent, "float32" or a {DTypePolicy, Policy} dict named float32. */
st_status st__keras_dtype(const st__keras_ctx *c, const json_t *v);
/* axis: an int or a one-element list. */
st_status st__keras_axis(const st__keras_ctx *c, const json_t *cfg, int def, int *out);

/* Validate one layer entry {"class_name", "config", ...} into *out. */
st_status st__keras_parse_layer(const st__keras_ctx *c, const json_t *layer,
                                st__keras_layer *out);
/* Create the (unbuilt) layer of a validated entry; in is its input shape
 * (Reshape resolves a -1 against it). Errors are ST_ERR_FORMAT in c's terms.
 * The caller owns *out. (keras_json.c; tests/layer_probe.c uses it too.) */
st_status st__keras_make_layer(const st__keras_ctx *c, const st__keras_layer *k,
                               st_shape in, st_layer **out);

/* keras_json.c: the layer k describes, for an input of shape `in` (Reshape
 * resolves -1 against it); errors in the file's terms. */
st_status st__keras_make_layer(const st__keras_ctx *c, const st__keras_layer *k, st_shape in,
                               st_layer **out);
/* The last error (a constructor's, st_model_add's, st_layer_call's) as
 * ST_ERR_FORMAT naming c's file and layer. */
st_status st__keras_rethrow(const st__keras_ctx *c);
/* A model config's own options: every key in keys (NULL-terminated), and
 * trainable true; errors name the class cls ("Sequential", "Functional"). */
st_status st__keras_model_options(const st__keras_ctx *c, const json_t *cfg,
                                  const char *const *keys, const char *cls);
/* keras_functional.c: a "Functional"/"Model" document (root). */
st_status st__keras_import_functional(const st__keras_ctx *c, const json_t *root,
                                      const st_model_options *o, st_model **out);

#endif
