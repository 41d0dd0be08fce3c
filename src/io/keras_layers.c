/* Keras JSON importer: one layer entry {"class_name", "config", ...} into a
 * validated st__keras_layer. Each supported class lists the config keys it
 * understands; any other key is an error (an option that is silently ignored
 * could change results), as is any value Strata cannot honour. Adding a
 * class: a parse function and a row in k_classes. Any thread; no state. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/keras.h"

typedef st_status (*parse_fn)(const st__keras_ctx *c, const json_t *cfg,
                              st__keras_layer *k);

/* Regularizers and constraints: only null (they change the loss or weights). */
static st_status nulls(const st__keras_ctx *c, const json_t *cfg,
                       const char *const *keys) {
  st_status s = ST_OK;
  for (int i = 0; s == ST_OK && keys[i]; i++) s = st__keras_null(c, cfg, keys[i]);
  return s;
}

static const char *const k_dense_nulls[] = {
    "kernel_regularizer", "bias_regularizer", "activity_regularizer",
    "kernel_constraint", "bias_constraint", "lora_rank", "quantization_config", NULL};

static st_status parse_dense(const st__keras_ctx *c, const json_t *cfg,
                             st__keras_layer *k) {
  st_dense_options *o = &k->u.dense;
  *o = st_dense_default_options(1);
  st_status s = st__keras_int(c, cfg, "units", 1, ST__KERAS_MAX_UNITS, 0, true, &o->units);
  if (s == ST_OK) s = st__keras_activation(c, cfg, "activation", &o->activation);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "use_bias", true, &o->use_bias);
  if (s == ST_OK)
    s = st__keras_init(c, cfg, "kernel_initializer", ST_INIT_GLOROT_UNIFORM, &o->kernel_init);
  if (s == ST_OK)
    s = st__keras_init(c, cfg, "bias_initializer", ST_INIT_ZEROS, &o->bias_init);
  if (s == ST_OK) s = nulls(c, cfg, k_dense_nulls);
  return s;
}


/* What Conv1D and Conv2D share: channels-last, no dilation or groups, then
 * activation, use_bias, the two initializers, no regularizers/constraints. */
static st_status conv_common(const st__keras_ctx *c, const json_t *cfg, st_activation *act,
                             bool *use_bias, st_init *kernel_init, st_init *bias_init) {
  st_status s = st__keras_data_format(c, cfg);
  if (s == ST_OK) s = st__keras_ones(c, cfg, "dilation_rate");
  if (s == ST_OK) s = st__keras_ones(c, cfg, "groups");
  if (s == ST_OK) s = st__keras_activation(c, cfg, "activation", act);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "use_bias", true, use_bias);
  if (s == ST_OK)
    s = st__keras_init(c, cfg, "kernel_initializer", ST_INIT_GLOROT_UNIFORM, kernel_init);
  if (s == ST_OK) s = st__keras_init(c, cfg, "bias_initializer", ST_INIT_ZEROS, bias_init);
  return s == ST_OK ? nulls(c, cfg, k_dense_nulls) : s;
}

static st_status parse_conv2d(const st__keras_ctx *c, const json_t *cfg,
                              st__keras_layer *k) {
  st_conv2d_options *o = &k->u.conv;
  int ks[2] = {1, 1}, st[2] = {1, 1};
  *o = st_conv2d_default_options(1, 1, 1);
  st_status s = st__keras_int(c, cfg, "filters", 1, ST__KERAS_MAX_UNITS, 0, true, &o->filters);
  if (s == ST_OK && !json_object_get(cfg, "kernel_size"))
    s = st__keras_error(c, "missing option 'kernel_size'");
  if (s == ST_OK) s = st__keras_pair(c, cfg, "kernel_size", 1, ST__KERAS_MAX_KERNEL, 1, false, ks);
  if (s == ST_OK) s = st__keras_pair(c, cfg, "strides", 1, ST__KERAS_MAX_KERNEL, 1, false, st);
  if (s == ST_OK) s = st__keras_padding(c, cfg, &o->padding);
  if (s == ST_OK)
    s = conv_common(c, cfg, &o->activation, &o->use_bias, &o->kernel_init, &o->bias_init);
  o->kh = ks[0], o->kw = ks[1], o->sh = st[0], o->sw = st[1];
  return s;
}

static st_status parse_pool(const st__keras_ctx *c, const json_t *cfg,
                            st__keras_layer *k) {
  st_pool2d_options *o = &k->u.pool;
  int ps[2] = {2, 2}, st[2] = {0, 0};
  *o = st_pool2d_default_options(2);
  st_status s = st__keras_pair(c, cfg, "pool_size", 1, ST__KERAS_MAX_KERNEL, 2, false, ps);
  if (s == ST_OK) s = st__keras_pair(c, cfg, "strides", 1, ST__KERAS_MAX_KERNEL, 0, true, st);
  if (s == ST_OK) s = st__keras_padding(c, cfg, &o->padding);
  if (s == ST_OK) s = st__keras_data_format(c, cfg);
  o->ph = ps[0], o->pw = ps[1], o->sh = st[0], o->sw = st[1];
  return s;
}

static st_status parse_flatten(const st__keras_ctx *c, const json_t *cfg,
                               st__keras_layer *k) {
  return st__keras_data_format(c, cfg);
}

static st_status parse_dropout(const st__keras_ctx *c, const json_t *cfg,
                               st__keras_layer *k) {
  char b[80];
  const json_t *seed = json_object_get(cfg, "seed");
  if (!json_object_get(cfg, "rate")) return st__keras_error(c, "missing option 'rate'");
  st_status s = st__keras_float(c, cfg, "rate", 0.0, 0.999999, 0.0, &k->u.rate);
  if (s == ST_OK) s = st__keras_null(c, cfg, "noise_shape");
  if (s == ST_OK && seed && !json_is_null(seed) && !json_is_integer(seed))
    s = st__keras_error(c, "seed %s is not an integer", st__keras_show(seed, b, sizeof b));
  return s; /* an integer seed is ignored: masks come from the model seed */
}

static const char *const k_bn_nulls[] = {
    "beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint",
    "renorm_clipping", "virtual_batch_size", "adjustment", NULL};

/* Keras's default initializers are the only ones Strata's BatchNormalization
 * has: gamma ones, beta zeros, moving mean zeros, moving variance ones. */
static st_status bn_inits(const st__keras_ctx *c, const json_t *cfg) {
  static const struct { const char *key; st_init want; } k[] = {
      {"gamma_initializer", ST_INIT_ONES}, {"beta_initializer", ST_INIT_ZEROS},
      {"moving_mean_initializer", ST_INIT_ZEROS},
      {"moving_variance_initializer", ST_INIT_ONES}};
  for (int i = 0; i < 4; i++) {
    st_init got;
    st_status s = st__keras_init(c, cfg, k[i].key, k[i].want, &got);
    if (s != ST_OK) return s;
    if (got != k[i].want)
      return st__keras_error(c, "%s '%s' is not supported (only %s)", k[i].key,
                             st_init_name(got), st_init_name(k[i].want));
  }
  return ST_OK;
}

static st_status parse_bn(const st__keras_ctx *c, const json_t *cfg, st__keras_layer *k) {
  st_batchnorm_options *o = &k->u.bn;
  *o = st_batchnorm_default_options();
  st_status s = st__keras_axis(c, cfg, -1, &k->axis);
  if (s == ST_OK) s = st__keras_float(c, cfg, "momentum", 0.0, 1.0, 0.99, &o->momentum);
  if (s == ST_OK) s = st__keras_float(c, cfg, "epsilon", 1e-30, 1.0, 1e-3, &o->epsilon);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "center", true, &o->center);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "scale", true, &o->scale);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "synchronized", false, &o->synchronized);
  if (s == ST_OK) s = bn_inits(c, cfg);
  if (s == ST_OK) s = nulls(c, cfg, k_bn_nulls);
  if (s == ST_OK) s = st__keras_false(c, cfg, "renorm");
  return s; /* "fused" and "renorm_momentum" do not change results */
}

static st_status parse_activation(const st__keras_ctx *c, const json_t *cfg,
                                  st__keras_layer *k) {
  if (!json_object_get(cfg, "activation"))
    return st__keras_error(c, "missing option 'activation'");
  return st__keras_activation(c, cfg, "activation", &k->u.act);
}

/* ReLU: with its defaults (max_value null, negative_slope 0, threshold 0) an
 * Activation(relu), as before issue 28; otherwise the ReLU layer kind. */
static st_status parse_relu(const st__keras_ctx *c, const json_t *cfg,
                            st__keras_layer *k) {
  st_relu_options o = st_relu_default_options();
  const json_t *mv = json_object_get(cfg, "max_value");
  st_status s = ST_OK;
  if (mv && !json_is_null(mv))
    s = st__keras_float(c, cfg, "max_value", 0.0, 3.4e38, 0.0, &o.max_value);
  if (s == ST_OK) s = st__keras_float(c, cfg, "negative_slope", 0.0, 3.4e38, 0.0, &o.negative_slope);
  if (s == ST_OK) s = st__keras_float(c, cfg, "threshold", 0.0, 3.4e38, 0.0, &o.threshold);
  bool plain = isinf(o.max_value) && o.negative_slope == 0.0f && o.threshold == 0.0f;
  k->kind = plain ? ST__K_ACTIVATION : ST__K_RELU;
  if (plain)
    k->u.act = ST_ACT_RELU;
  else
    k->u.relu = o;
  return s;
}

/* ---- issue 28, layers-a: global pooling, ZeroPadding2D, LeakyReLU ---- */

/* GlobalAverage/MaxPooling1D/2D: channels_last, keepdims false. */
static st_status parse_global_pool(const st__keras_ctx *c, const json_t *cfg,
                                   st__keras_layer *k) {
  st_status s = st__keras_data_format(c, cfg);
  if (s == ST_OK) s = st__keras_false(c, cfg, "keepdims");
  return s;
}

/* One padding value: an integer in 0..ST__KERAS_MAX_KERNEL. */
static bool pad_value(const json_t *v, int *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0 ||
      json_integer_value(v) > ST__KERAS_MAX_KERNEL)
    return false;
  *out = (int)json_integer_value(v);
  return true;
}

/* padding: n, [h, w] or [[top, bottom], [left, right]] (Keras 1 default). */
static st_status parse_zeropad(const st__keras_ctx *c, const json_t *cfg,
                               st__keras_layer *k) {
  st_zeropad2d_options *o = &k->u.zeropad;
  const json_t *v = json_object_get(cfg, "padding");
  int p[4] = {1, 1, 1, 1}; /* top, bottom, left, right */
  bool ok = true;
  if (v && json_is_integer(v)) {
    ok = pad_value(v, &p[0]);
    p[1] = p[2] = p[3] = p[0];
  } else if (v) {
    ok = json_is_array(v) && json_array_size(v) == 2;
    for (int a = 0; ok && a < 2; a++) {
      const json_t *e = json_array_get(v, (size_t)a);
      if (json_is_array(e))
        ok = json_array_size(e) == 2 && pad_value(json_array_get(e, 0), &p[2 * a]) &&
             pad_value(json_array_get(e, 1), &p[2 * a + 1]);
      else
        ok = pad_value(e, &p[2 * a]) && pad_value(e, &p[2 * a + 1]);
    }
  }
  char b[80];
  if (!ok)
    return st__keras_error(c, "padding %s is not supported (expected n, [h, w] or [[top, "
                           "bottom], [left, right]] of integers in 0..%d)",
                           st__keras_show(v, b, sizeof b), ST__KERAS_MAX_KERNEL);
  *o = st_zeropad2d_default_options(1);
  o->top = p[0], o->bottom = p[1], o->left = p[2], o->right = p[3];
  return st__keras_data_format(c, cfg);
}

/* LeakyReLU: negative_slope (Keras 3) or alpha (Keras 2), default 0.3. */
static st_status parse_leaky_relu(const st__keras_ctx *c, const json_t *cfg,
                                  st__keras_layer *k) {
  bool ns = json_object_get(cfg, "negative_slope") != NULL;
  if (ns && json_object_get(cfg, "alpha"))
    return st__keras_error(c, "both negative_slope and alpha given");
  k->u.relu = st_relu_default_options();
  return st__keras_float(c, cfg, ns ? "negative_slope" : "alpha", 0.0, 3.4e38, 0.3,
                         &k->u.relu.negative_slope);
}
/* ---- end of layers-a ---- */

static st_status parse_softmax(const st__keras_ctx *c, const json_t *cfg,
                               st__keras_layer *k) {
  k->u.act = ST_ACT_SOFTMAX;
  return st__keras_axis(c, cfg, -1, &k->axis);
}

static st_status parse_reshape(const st__keras_ctx *c, const json_t *cfg,
                               st__keras_layer *k) {
  const json_t *v = json_object_get(cfg, "target_shape");
  size_t n = json_array_size(v);
  int unknown = 0;
  char b[120];
  bool ok = json_is_array(v) && n >= 1 && n <= ST_MAX_RANK;
  for (size_t i = 0; ok && i < n; i++) {
    const json_t *e = json_array_get(v, i);
    long long d = json_is_integer(e) ? (long long)json_integer_value(e) : 0;
    ok = (d >= 1 && d <= ST__KERAS_MAX_FLOATS) || (d == -1 && ++unknown == 1);
    k->target[i] = (int)d;
  }
  if (!ok)
    return st__keras_error(c, "target_shape %s is not supported (1 to %d positive "
                           "integers, at most one -1)", st__keras_show(v, b, sizeof b),
                           ST_MAX_RANK);
  k->target_rank = (int)n;
  return ST_OK;
}

/* ---- Conv1D, DepthwiseConv2D, Embedding, LayerNormalization (issue 28) ---- */

/* An int or a one-element list [n] in lo..hi (Conv1D kernel_size, strides). */
static st_status one_int(const st__keras_ctx *c, const json_t *cfg, const char *key,
                         int def, int *out) {
  const json_t *v = json_object_get(cfg, key), *e = v;
  char b[80];
  *out = def;
  if (!v) return ST_OK;
  if (json_is_array(v)) e = json_array_size(v) == 1 ? json_array_get(v, 0) : NULL;
  if (!json_is_integer(e) || json_integer_value(e) < 1 ||
      json_integer_value(e) > ST__KERAS_MAX_KERNEL)
    return st__keras_error(c, "%s %s is not supported (expected an integer or [integer] "
                           "in 1..%d)", key, st__keras_show(v, b, sizeof b),
                           ST__KERAS_MAX_KERNEL);
  *out = (int)json_integer_value(e);
  return ST_OK;
}

static st_status parse_conv1d(const st__keras_ctx *c, const json_t *cfg,
                              st__keras_layer *k) {
  st_conv1d_options *o = &k->u.conv1d;
  const json_t *pad = json_object_get(cfg, "padding");
  const char *p = pad ? json_string_value(pad) : "valid";
  char b[80];
  *o = st_conv1d_default_options(1, 1);
  st_status s = st__keras_int(c, cfg, "filters", 1, ST__KERAS_MAX_UNITS, 0, true, &o->filters);
  if (s == ST_OK && !json_object_get(cfg, "kernel_size"))
    s = st__keras_error(c, "missing option 'kernel_size'");
  if (s == ST_OK) s = one_int(c, cfg, "kernel_size", 1, &o->kernel_size);
  if (s == ST_OK) s = one_int(c, cfg, "strides", 1, &o->strides);
  if (s == ST_OK && !(p && (!strcmp(p, "valid") || !strcmp(p, "same") || !strcmp(p, "causal"))))
    s = st__keras_error(c, "padding %s is not supported (valid, same or causal)",
                        st__keras_show(pad, b, sizeof b));
  if (s == ST_OK)
    o->padding = !strcmp(p, "valid") ? ST_PAD_VALID : !strcmp(p, "same") ? ST_PAD_SAME
                                                                        : ST_PAD_CAUSAL;
  if (s == ST_OK)
    s = conv_common(c, cfg, &o->activation, &o->use_bias, &o->kernel_init, &o->bias_init);
  return s;
}

static const char *const k_dw_nulls[] = {
    "depthwise_regularizer", "bias_regularizer", "activity_regularizer",
    "depthwise_constraint", "bias_constraint", NULL};

static st_status parse_depthwise(const st__keras_ctx *c, const json_t *cfg,
                                 st__keras_layer *k) {
  st_depthwise_conv2d_options *o = &k->u.dw;
  int ks[2] = {1, 1}, st[2] = {1, 1};
  *o = st_depthwise_conv2d_default_options(1, 1);
  st_status s = ST_OK;
  if (!json_object_get(cfg, "kernel_size"))
    s = st__keras_error(c, "missing option 'kernel_size'");
  if (s == ST_OK) s = st__keras_pair(c, cfg, "kernel_size", 1, ST__KERAS_MAX_KERNEL, 1, false, ks);
  if (s == ST_OK) s = st__keras_pair(c, cfg, "strides", 1, ST__KERAS_MAX_KERNEL, 1, false, st);
  if (s == ST_OK)
    s = st__keras_int(c, cfg, "depth_multiplier", 1, ST__KERAS_MAX_UNITS, 1, false,
                      &o->depth_multiplier);
  if (s == ST_OK) s = st__keras_padding(c, cfg, &o->padding);
  if (s == ST_OK) s = st__keras_data_format(c, cfg);
  if (s == ST_OK) s = st__keras_ones(c, cfg, "dilation_rate");
  if (s == ST_OK) s = st__keras_ones(c, cfg, "groups"); /* Keras 2 writes groups 1 */
  if (s == ST_OK) s = st__keras_activation(c, cfg, "activation", &o->activation);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "use_bias", true, &o->use_bias);
  if (s == ST_OK)
    s = st__keras_init(c, cfg, "depthwise_initializer", ST_INIT_GLOROT_UNIFORM,
                       &o->depthwise_init);
  if (s == ST_OK)
    s = st__keras_init(c, cfg, "bias_initializer", ST_INIT_ZEROS, &o->bias_init);
  if (s == ST_OK) s = nulls(c, cfg, k_dw_nulls);
  o->kh = ks[0], o->kw = ks[1], o->sh = st[0], o->sw = st[1];
  return s;
}

static const char *const k_emb_nulls[] = {
    "embeddings_regularizer", "activity_regularizer", "embeddings_constraint", "lora_rank",
    NULL};

/* keras_hub PositionEmbedding: sequence_length, initializer. */
static st_status parse_position_embedding(const st__keras_ctx *c, const json_t *cfg,
                                          st__keras_layer *k) {
  st_position_embedding_options *o = &k->u.pos;
  *o = st_position_embedding_default_options(1);
  st_status s = st__keras_int(c, cfg, "sequence_length", 1, ST__KERAS_MAX_UNITS, 0, true,
                              &o->sequence_length);
  if (s == ST_OK) s = st__keras_init(c, cfg, "initializer", ST_INIT_GLOROT_UNIFORM, &o->initializer);
  return s;
}

/* Strata's tied head names its Embedding ({"embedding": "wte"}, as
 * st_model_to_keras_json writes it); keras_hub's ReversibleEmbedding is one
 * layer called twice (ids, then reverse=True), which is not followed. */
static st_status parse_reversible_embedding(const st__keras_ctx *c, const json_t *cfg,
                                            st__keras_layer *k) {
  const json_t *e = json_object_get(cfg, "embedding");
  if (!json_is_string(e))
    return st__keras_error(c, "ReversibleEmbedding without an \"embedding\" name is not "
                           "imported (keras_hub calls one layer both ways: build the tied head "
                           "with st_reversible_embedding, or st_gpt_create)");
  if (strlen(json_string_value(e)) >= sizeof k->tied)
    return st__keras_error(c, "embedding name is longer than %d bytes", (int)sizeof k->tied - 1);
  snprintf(k->tied, sizeof k->tied, "%s", json_string_value(e));
  return ST_OK;
}

/* Embedding: input_length (Keras 2) is accepted and not used: the input shape
 * comes from the InputLayer or batch_input_shape; mask_zero only false. */
static st_status parse_embedding(const st__keras_ctx *c, const json_t *cfg,
                                 st__keras_layer *k) {
  st_embedding_options *o = &k->u.emb;
  const json_t *len = json_object_get(cfg, "input_length");
  char b[80];
  *o = st_embedding_default_options(1, 1);
  st_status s =
      st__keras_int(c, cfg, "input_dim", 1, ST__KERAS_MAX_UNITS, 0, true, &o->input_dim);
  if (s == ST_OK)
    s = st__keras_int(c, cfg, "output_dim", 1, ST__KERAS_MAX_UNITS, 0, true, &o->output_dim);
  if (s == ST_OK)
    s = st__keras_init(c, cfg, "embeddings_initializer", ST_INIT_RANDOM_UNIFORM,
                       &o->embeddings_init);
  if (s == ST_OK) s = st__keras_false(c, cfg, "mask_zero");
  if (s == ST_OK) s = st__keras_false(c, cfg, "sparse");
  if (s == ST_OK && len && !json_is_null(len) && !json_is_integer(len))
    s = st__keras_error(c, "input_length %s is not an integer",
                        st__keras_show(len, b, sizeof b));
  if (s == ST_OK) s = nulls(c, cfg, k_emb_nulls);
  return s;
}

static st_status parse_layernorm(const st__keras_ctx *c, const json_t *cfg,
                                 st__keras_layer *k) {
  st_layernorm_options *o = &k->u.ln;
  st_init gi, bi;
  *o = st_layernorm_default_options();
  st_status s = st__keras_axis(c, cfg, -1, &k->axis);
  if (s == ST_OK) s = st__keras_float(c, cfg, "epsilon", 1e-30, 1.0, 1e-3, &o->epsilon);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "center", true, &o->center);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "scale", true, &o->scale);
  if (s == ST_OK) s = st__keras_false(c, cfg, "rms_scaling");
  if (s == ST_OK) s = st__keras_init(c, cfg, "gamma_initializer", ST_INIT_ONES, &gi);
  if (s == ST_OK && gi != ST_INIT_ONES)
    s = st__keras_error(c, "gamma_initializer '%s' is not supported (only ones)",
                        st_init_name(gi));
  if (s == ST_OK) s = st__keras_init(c, cfg, "beta_initializer", ST_INIT_ZEROS, &bi);
  if (s == ST_OK && bi != ST_INIT_ZEROS)
    s = st__keras_error(c, "beta_initializer '%s' is not supported (only zeros)",
                        st_init_name(bi));
  if (s == ST_OK) s = nulls(c, cfg, k_bn_nulls);
  return s;
}
/* ---- end of the issue 28 (helper B) parsers ---- */

/* ---- merge layers and attention ---- */

/* Add, Subtract, Multiply: no options beyond the common ones. */
static st_status parse_merge(const st__keras_ctx *c, const json_t *cfg, st__keras_layer *k) {
  (void)c, (void)cfg, (void)k;
  return ST_OK;
}

/* Concatenate: axis (default -1); not the batch axis 0. */
static st_status parse_concatenate(const st__keras_ctx *c, const json_t *cfg,
                                   st__keras_layer *k) {
  st_status s = st__keras_int(c, cfg, "axis", -ST_MAX_RANK, ST_MAX_RANK, -1, false,
                              &k->u.concat_axis);
  if (s == ST_OK && k->u.concat_axis == 0)
    s = st__keras_error(c, "axis 0 (the batch axis) cannot be concatenated");
  return s;
}

/* output_shape: null, an integer or a list of one integer (per-example
 * [T, out] outputs only). */
static st_status mha_output_shape(const st__keras_ctx *c, const json_t *cfg, int *out) {
  const json_t *v = json_object_get(cfg, "output_shape");
  char b[80];
  *out = 0;
  if (!v || json_is_null(v)) return ST_OK;
  const json_t *e = json_is_array(v) && json_array_size(v) == 1 ? json_array_get(v, 0) : v;
  long long d = json_is_integer(e) ? (long long)json_integer_value(e) : 0;
  if (d < 1 || d > ST__KERAS_MAX_UNITS)
    return st__keras_error(c, "output_shape %s is not supported (null, a positive integer "
                           "or a list of one)", st__keras_show(v, b, sizeof b));
  *out = (int)d;
  return ST_OK;
}

/* attention_axes: null, or the one time axis of [batch, T, d] inputs. */
static st_status mha_axes(const st__keras_ctx *c, const json_t *cfg) {
  const json_t *v = json_object_get(cfg, "attention_axes");
  char b[80];
  if (!v || json_is_null(v)) return ST_OK;
  const json_t *e = json_is_array(v) && json_array_size(v) == 1 ? json_array_get(v, 0) : v;
  long long a = json_is_integer(e) ? (long long)json_integer_value(e) : 0;
  if (a == 1 || a == -2) return ST_OK;
  return st__keras_error(c, "attention_axes %s is not supported (null or [1]: attention over "
                         "the time axis of [batch, T, features] inputs)",
                         st__keras_show(v, b, sizeof b));
}

static st_status parse_mha(const st__keras_ctx *c, const json_t *cfg, st__keras_layer *k) {
  st_mha_options *o = &k->u.mha;
  *o = st_multi_head_attention_default_options(1, 1);
  const json_t *seed = json_object_get(cfg, "seed");
  char b[80];
  st_status s = st__keras_int(c, cfg, "num_heads", 1, ST__KERAS_MAX_UNITS, 0, true, &o->num_heads);
  if (s == ST_OK) s = st__keras_int(c, cfg, "key_dim", 1, ST__KERAS_MAX_UNITS, 0, true, &o->key_dim);
  if (s == ST_OK)
    s = st__keras_int(c, cfg, "value_dim", 1, ST__KERAS_MAX_UNITS, 0, false, &o->value_dim);
  if (s == ST_OK) s = st__keras_float(c, cfg, "dropout", 0.0, 0.999999, 0.0, &o->dropout);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "use_bias", true, &o->use_bias);
  if (s == ST_OK) s = mha_output_shape(c, cfg, &o->output_dim);
  if (s == ST_OK) s = mha_axes(c, cfg);
  if (s == ST_OK)
    s = st__keras_init(c, cfg, "kernel_initializer", ST_INIT_GLOROT_UNIFORM, &o->kernel_init);
  if (s == ST_OK)
    s = st__keras_init(c, cfg, "bias_initializer", ST_INIT_ZEROS, &o->bias_init);
  if (s == ST_OK) s = nulls(c, cfg, k_dense_nulls);
  if (s == ST_OK) s = st__keras_bool(c, cfg, "use_causal_mask", false, &o->use_causal_mask);
  if (s == ST_OK && seed && !json_is_null(seed) && !json_is_integer(seed))
    s = st__keras_error(c, "seed %s is not an integer", st__keras_show(seed, b, sizeof b));
  return s; /* query/key/value_shape (Keras 2) are the inputs' shapes; the seed
               is ignored (dropout masks come from the model seed). Keras
               passes use_causal_mask when calling the layer (the graph
               importer maps it); Strata also reads it here, a key of its own
               (layer-level configs: tests/torch_cases_merge.py) */
}

/* ---- end of merge layers and attention ---- */

/* InputLayer: batch_shape (Keras 3) or batch_input_shape (Keras 2). */
static st_status parse_input(const st__keras_ctx *c, const json_t *cfg,
                             st__keras_layer *k) {
  const json_t *a = json_object_get(cfg, "batch_shape");
  const json_t *b = json_object_get(cfg, "batch_input_shape");
  if (!a && !b) return st__keras_error(c, "missing option 'batch_shape'");
  if (a && b) return st__keras_error(c, "both batch_shape and batch_input_shape given");
  st_status s = st__keras_shape(c, a ? "batch_shape" : "batch_input_shape", a ? a : b,
                                &k->input);
  if (s == ST_OK) s = st__keras_false(c, cfg, "sparse");
  if (s == ST_OK) s = st__keras_false(c, cfg, "ragged");
  if (s == ST_OK) s = st__keras_false(c, cfg, "optional");
  k->has_input = true;
  return s;
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})
static const char *const k_no_keys[] = {NULL};
#define KERNEL_KEYS "kernel_initializer", "bias_initializer", "kernel_regularizer", \
    "bias_regularizer", "activity_regularizer", "kernel_constraint",              \
    "bias_constraint", "lora_rank", "lora_alpha", "activation", "use_bias"

static const struct {
  const char *cls;
  st__keras_kind kind;
  parse_fn parse;
  const char *const *keys; /* besides name, trainable, dtype, batch_input_shape */
} k_classes[] = {
    {"InputLayer", ST__K_INPUT, parse_input,
     KEYS("batch_shape", "sparse", "ragged", "optional")},
    {"Dense", ST__K_DENSE, parse_dense, KEYS("units", "quantization_config", KERNEL_KEYS)},
    {"Conv2D", ST__K_CONV2D, parse_conv2d,
     KEYS("filters", "kernel_size", "strides", "padding", "data_format",
          "dilation_rate", "groups", KERNEL_KEYS)},
    {"MaxPooling2D", ST__K_MAXPOOL, parse_pool,
     KEYS("pool_size", "strides", "padding", "data_format")},
    {"AveragePooling2D", ST__K_AVGPOOL, parse_pool,
     KEYS("pool_size", "strides", "padding", "data_format")},
    {"Flatten", ST__K_FLATTEN, parse_flatten, KEYS("data_format")},
    {"Dropout", ST__K_DROPOUT, parse_dropout, KEYS("rate", "noise_shape", "seed")},
    {"BatchNormalization", ST__K_BATCHNORM, parse_bn,
     KEYS("axis", "momentum", "epsilon", "center", "scale", "beta_initializer",
          "gamma_initializer", "moving_mean_initializer", "moving_variance_initializer",
          "beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint",
          "synchronized", "renorm", "renorm_clipping", "renorm_momentum", "fused",
          "virtual_batch_size", "adjustment")},
    {"Activation", ST__K_ACTIVATION, parse_activation, KEYS("activation")},
    {"ReLU", ST__K_ACTIVATION, parse_relu, KEYS("max_value", "negative_slope", "threshold")},
    {"Softmax", ST__K_ACTIVATION, parse_softmax, KEYS("axis")},
    {"Reshape", ST__K_RESHAPE, parse_reshape, KEYS("target_shape")},
    /* issue 28, layers-a */
    {"GlobalAveragePooling2D", ST__K_GLOBAL_AVG2D, parse_global_pool,
     KEYS("data_format", "keepdims")},
    {"GlobalMaxPooling2D", ST__K_GLOBAL_MAX2D, parse_global_pool, KEYS("data_format", "keepdims")},
    {"GlobalAveragePooling1D", ST__K_GLOBAL_AVG1D, parse_global_pool,
     KEYS("data_format", "keepdims")},
    {"GlobalMaxPooling1D", ST__K_GLOBAL_MAX1D, parse_global_pool, KEYS("data_format", "keepdims")},
    {"ZeroPadding2D", ST__K_ZEROPAD2D, parse_zeropad, KEYS("padding", "data_format")},
    {"LeakyReLU", ST__K_LEAKY_RELU, parse_leaky_relu, KEYS("negative_slope", "alpha")},
    /* end of layers-a */
    /* issue 28, helper B */
    {"Conv1D", ST__K_CONV1D, parse_conv1d,
     KEYS("filters", "kernel_size", "strides", "padding", "data_format",
          "dilation_rate", "groups", KERNEL_KEYS)},
    {"DepthwiseConv2D", ST__K_DEPTHWISE, parse_depthwise,
     KEYS("kernel_size", "strides", "padding", "depth_multiplier", "data_format",
          "dilation_rate", "groups", "activation", "use_bias", "depthwise_initializer",
          "bias_initializer", "depthwise_regularizer", "bias_regularizer",
          "activity_regularizer", "depthwise_constraint", "bias_constraint")},
    {"Embedding", ST__K_EMBEDDING, parse_embedding,
     KEYS("input_dim", "output_dim", "embeddings_initializer", "embeddings_regularizer",
          "activity_regularizer", "embeddings_constraint", "mask_zero", "input_length",
          "sparse", "lora_rank")},
    {"LayerNormalization", ST__K_LAYERNORM, parse_layernorm,
     KEYS("axis", "epsilon", "center", "scale", "rms_scaling", "beta_initializer",
          "gamma_initializer", "beta_regularizer", "gamma_regularizer", "beta_constraint",
          "gamma_constraint")},
    /* merge layers and attention */
    {"Add", ST__K_ADD, parse_merge, k_no_keys},
    {"Subtract", ST__K_SUBTRACT, parse_merge, k_no_keys},
    {"Multiply", ST__K_MULTIPLY, parse_merge, k_no_keys},
    {"Concatenate", ST__K_CONCATENATE, parse_concatenate, KEYS("axis")},
    {"MultiHeadAttention", ST__K_MHA, parse_mha,
     KEYS("num_heads", "key_dim", "value_dim", "dropout", "use_bias", "output_shape",
          "attention_axes", "seed", "query_shape", "key_shape", "value_shape", "use_causal_mask",
          "kernel_initializer", "bias_initializer", "kernel_regularizer", "bias_regularizer",
          "activity_regularizer", "kernel_constraint", "bias_constraint")},
    /* issue 31 (keras_hub) */
    {"PositionEmbedding", ST__K_POSITION_EMBEDDING, parse_position_embedding,
     KEYS("sequence_length", "initializer")},
    {"ReversibleEmbedding", ST__K_REVERSIBLE_EMBEDDING, parse_reversible_embedding,
     KEYS("embedding", "input_dim", "output_dim", "tie_weights", "embeddings_initializer",
          "embeddings_regularizer", "embeddings_constraint", "reverse_dtype", "logit_soft_cap",
          "mask_zero")},
};
#define NCLASSES ((int)(sizeof k_classes / sizeof k_classes[0]))

static bool in_list(const char *key, const char *const *keys) {
  for (int i = 0; keys[i]; i++)
    if (strcmp(key, keys[i]) == 0) return true;
  return false;
}

static const char *const k_common[] = {"name", "trainable", "dtype",
                                       "batch_input_shape", NULL};
static const char *const k_entry[] = {"class_name", "config", "module",
                                      "registered_name", "build_config", "name", NULL};

static st_status check_keys(const st__keras_ctx *c, const json_t *obj,
                            const char *const *a, const char *const *b,
                            const char *what) {
  const char *key;
  json_t *v;
  char buf[64];
  json_object_foreach((json_t *)obj, key, v) {
    if (!in_list(key, a) && !(b && in_list(key, b)))
      return st__keras_error(c, "%s '%s' is not supported", what,
                             st__keras_clean(key, buf, sizeof buf));
  }
  return ST_OK;
}

/* 1..63 printable bytes without '/' (it joins layer and tensor names in weight
 * files); absent or null = automatic. */
static st_status layer_name(st__keras_ctx *c, const json_t *cfg, st__keras_layer *k) {
  const json_t *v = json_object_get(cfg, "name");
  if (!v || json_is_null(v)) return ST_OK;
  const char *s = json_string_value(v);
  bool ok = s && s[0] && strlen(s) < ST_NAME_MAX;
  for (size_t i = 0; ok && s[i]; i++) {
    unsigned char ch = (unsigned char)s[i];
    ok = ch >= 0x20 && ch != 0x7f && ch != '/';
  }
  if (!ok) {
    st__keras_show(v, c->name, sizeof c->name);
    return st__keras_error(c, "layer name is not supported (1 to %d printable "
                           "bytes without '/')", ST_NAME_MAX - 1);
  }
  snprintf(k->name, sizeof k->name, "%s", s);
  snprintf(c->name, sizeof c->name, "%s", s);
  return ST_OK;
}

/* The entry around the config: a Keras class, not a custom or registered one. */
static st_status entry_ok(const st__keras_ctx *c, const json_t *layer, const char *cls) {
  const json_t *mod = json_object_get(layer, "module");
  const json_t *reg = json_object_get(layer, "registered_name");
  const char *m = json_string_value(mod), *r = json_string_value(reg);
  char b[80];
  st_status s = check_keys(c, layer, k_entry, NULL, "layer entry key");
  if (s == ST_OK && mod && !(m && strncmp(m, "keras", 5) == 0))
    s = st__keras_error(c, "module %s is not supported (custom layers cannot be "
                        "imported)", st__keras_show(mod, b, sizeof b));
  if (s == ST_OK && reg && !json_is_null(reg) && !(r && strcmp(r, cls) == 0))
    s = st__keras_error(c, "registered_name %s is not supported (custom layers "
                        "cannot be imported)", st__keras_show(reg, b, sizeof b));
  return s;
}

static st_status unknown_class(const st__keras_ctx *c) {
  char list[1024] = "";
  size_t len = 0;
  for (int i = 0; i < NCLASSES && len < sizeof list; i++) {
    int w = snprintf(list + len, sizeof list - len, "%s%s", k_classes[i].cls,
                     i + 1 < NCLASSES ? ", " : "");
    if (w < 0) break;
    len += (size_t)w;
  }
  return st__keras_error(c, "layer class '%s' is not supported (supported: %s)",
                         c->cls, list);
}

/* What every class shares: trainable true, dtype float32 (InputLayer: or
 * int32/int64), and on layers other
 * than InputLayer an optional batch_input_shape (Keras 2's first layer). */
static st_status common(const st__keras_ctx *c, const json_t *cfg, st__keras_layer *k) {
  bool trainable;
  st_status s = st__keras_bool(c, cfg, "trainable", true, &trainable);
  if (s == ST_OK && !trainable)
    s = st__keras_error(c, "trainable false (a frozen layer) is not supported");
  /* An InputLayer of int32/int64 (Embedding ids) reads its values as floats:
   * exact for ids below 2^24. */
  const json_t *dt = json_object_get(cfg, "dtype");
  const char *ds = json_is_object(dt) /* Keras 3 {"class_name": "DTypePolicy", ...} */
                       ? json_string_value(json_object_get(json_object_get(dt, "config"), "name"))
                       : json_string_value(dt);
  bool int_input = k->kind == ST__K_INPUT && ds && (!strcmp(ds, "int32") || !strcmp(ds, "int64"));
  if (s == ST_OK && !int_input) s = st__keras_dtype(c, json_object_get(cfg, "dtype"));
  const json_t *bis = json_object_get(cfg, "batch_input_shape");
  if (s == ST_OK && k->kind != ST__K_INPUT && bis && !json_is_null(bis)) {
    s = st__keras_shape(c, "batch_input_shape", bis, &k->input);
    k->has_input = true;
  }
  return s;
}

st_status st__keras_parse_layer(const st__keras_ctx *c0, const json_t *layer,
                                st__keras_layer *k) {
  st__keras_ctx c = *c0;
  memset(k, 0, sizeof *k);
  if (!json_is_object(layer)) return st__keras_error(&c, "entry is not an object");
  const char *cls = json_string_value(json_object_get(layer, "class_name"));
  if (!cls) return st__keras_error(&c, "missing class_name");
  st__keras_clean(cls, c.cls, sizeof c.cls);
  const json_t *cfg = json_object_get(layer, "config");
  if (!json_is_object(cfg)) return st__keras_error(&c, "missing or malformed config");
  st_status s = layer_name(&c, cfg, k);
  if (s == ST_OK) s = entry_ok(&c, layer, cls);
  if (s != ST_OK) return s;
  int i = 0;
  while (i < NCLASSES && strcmp(cls, k_classes[i].cls) != 0) i++;
  if (i == NCLASSES) return unknown_class(&c);
  k->kind = k_classes[i].kind;
  k->cls = k_classes[i].cls;
  k->axis = -1;
  s = check_keys(&c, cfg, k_common, k_classes[i].keys, "option");
  if (s == ST_OK) s = common(&c, cfg, k);
  if (s == ST_OK) s = k_classes[i].parse(&c, cfg, k);
  return s;
}
