/* st_model_from_keras_json_text: import a Keras `model.to_json()` Sequential
 * from its text (st_model_from_keras_json: from a file, read here first).
 * Three steps, nothing created before the whole text is validated:
 *   1. parse the text with jansson (16 MiB cap; a file's size is checked with
 *      fstat before it is read; duplicate keys rejected) and check the
 *      nesting depth (64);
 *   2. validate every layer config into an st__keras_layer (keras_layers.c)
 *      and find the input shape;
 *   3. create the model and add the layers, checking each layer's size.
 * Nothing from the config is executed or used as a path. Errors are
 * ST_ERR_FORMAT naming the file (or the caller's origin name for text),
 * layer position, name, class and option.
 * Any thread (state is per call). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/train.h"
#include "base/fileio.h"
#include "io/keras.h"

/* Bounded recursion: deeper documents are refused before any walking below. */
static st_status depth_ok(const char *file, const json_t *v, int depth) {
  if (depth > ST__KERAS_MAX_DEPTH)
    return st_error(ST_ERR_FORMAT, "%s: JSON nested deeper than %d levels", file,
                    ST__KERAS_MAX_DEPTH);
  st_status s = ST_OK;
  if (json_is_array(v)) {
    for (size_t i = 0; s == ST_OK && i < json_array_size(v); i++)
      s = depth_ok(file, json_array_get(v, i), depth + 1);
  } else if (json_is_object(v)) {
    const char *key;
    json_t *e;
    json_object_foreach((json_t *)v, key, e) {
      if ((s = depth_ok(file, e, depth + 1)) != ST_OK) break;
    }
  }
  return s;
}

static const char *const k_seq_keys[] = {"name", "trainable", "dtype", "layers",
                                         "build_input_shape", NULL};

st_status st__keras_model_options(const st__keras_ctx *c, const json_t *cfg,
                                  const char *const *keys, const char *cls) {
  const char *key;
  json_t *v;
  char b[64];
  json_object_foreach((json_t *)cfg, key, v) {
    bool known = false;
    for (int i = 0; keys[i]; i++) known = known || strcmp(key, keys[i]) == 0;
    if (!known)
      return st__keras_error(c, "%s option '%s' is not supported", cls,
                             st__keras_clean(key, b, sizeof b));
  }
  const json_t *tr = json_object_get(cfg, "trainable");
  if (tr && !json_is_true(tr))
    return st__keras_error(c, "%s trainable %s is not supported (only true)", cls,
                           st__keras_show(tr, b, sizeof b));
  return ST_OK;
}

/* Sequential config: {"name", "layers": [...], ...} (or, in very old Keras 2
 * files, the layers list itself). */
static st_status seq_config(const st__keras_ctx *c, const json_t *cfg) {
  st_status s = st__keras_model_options(c, cfg, k_seq_keys, "Sequential");
  return s != ST_OK ? s : st__keras_dtype(c, json_object_get(cfg, "dtype"));
}

static st_status layout(const st__keras_ctx *c, const json_t *root, const json_t **cfg,
                        const json_t **layers) {
  char b[80];
  const json_t *cls = json_object_get(root, "class_name");
  const char *mod = json_string_value(json_object_get(root, "module"));
  if (!json_is_object(root)) return st__keras_error(c, "top level is not a JSON object");
  if (!json_is_string(cls) || strcmp(json_string_value(cls), "Sequential") != 0)
    return st__keras_error(c, "model class_name %s is not supported (Sequential, Functional "
                           "or Model)",
                           st__keras_show(cls, b, sizeof b));
  if (json_object_get(root, "module") && !(mod && strncmp(mod, "keras", 5) == 0))
    return st__keras_error(c, "model module %s is not supported",
                           st__keras_show(json_object_get(root, "module"), b, sizeof b));
  *cfg = json_object_get(root, "config");
  *layers = json_is_array(*cfg) ? *cfg : json_object_get(*cfg, "layers");
  if (json_is_array(*cfg)) *cfg = NULL;
  else if (!json_is_object(*cfg) || !json_is_array(*layers))
    return st__keras_error(c, "config.layers is missing or not a list");
  st_status s = *cfg ? seq_config(c, *cfg) : ST_OK;
  size_t n = json_array_size(*layers);
  if (s == ST_OK && (n == 0 || n > ST__KERAS_MAX_LAYERS))
    s = st__keras_error(c, "%zu layers (expected 1..%d)", n, ST__KERAS_MAX_LAYERS);
  return s;
}

static void layer_ctx(const st__keras_ctx *c, int i, const st__keras_layer *k,
                      st__keras_ctx *out) {
  *out = *c;
  out->index = i;
  snprintf(out->cls, sizeof out->cls, "%s", k->cls);
  snprintf(out->name, sizeof out->name, "%s", k->name);
}

static st_status shape_mismatch(const st__keras_ctx *c, st_shape a, st_shape b) {
  char x[64], y[64];
  return st__keras_error(c, "input shape %s does not match the earlier %s",
                         st_shape_format(a, x, sizeof x), st_shape_format(b, y, sizeof y));
}

/* The input shape: InputLayer (first entry only), batch_input_shape on the
 * first real layer, or the Sequential's build_input_shape; all that are given
 * must agree. */
static st_status input_shape(const st__keras_ctx *c, const json_t *cfg,
                             const st__keras_layer *k, int n, st_shape *in) {
  bool have = false, first = true;
  st__keras_ctx lc;
  for (int i = 0; i < n; i++) {
    layer_ctx(c, i, &k[i], &lc);
    if (k[i].kind == ST__K_INPUT && i != 0)
      return st__keras_error(&lc, "InputLayer must be the first layer");
    if (k[i].has_input && !first && k[i].kind != ST__K_INPUT)
      return st__keras_error(&lc, "batch_input_shape is only supported on the first layer");
    if (k[i].has_input && have && !st_shape_equal(k[i].input, *in))
      return shape_mismatch(&lc, k[i].input, *in);
    if (k[i].has_input) *in = k[i].input, have = true;
    if (k[i].kind != ST__K_INPUT) first = false;
  }
  const json_t *bis = json_object_get(cfg, "build_input_shape");
  if (bis && !json_is_null(bis)) {
    st_shape b;
    st_status s = st__keras_shape(c, "build_input_shape", bis, &b);
    if (s != ST_OK) return s;
    if (have && !st_shape_equal(b, *in)) return shape_mismatch(c, b, *in);
    *in = b, have = true;
  }
  if (first) return st__keras_error(c, "no layers besides the InputLayer");
  if (!have)
    return st__keras_error(c, "no input shape: expected an InputLayer with batch_shape "
                           "or batch_input_shape, or batch_input_shape on the first layer");
  return ST_OK;
}

/* Re-raise the error of a constructor or st_model_add as ST_ERR_FORMAT in the
 * file's terms (the model's own "layer N ('x'): " prefix counts differently). */
st_status st__keras_rethrow(const st__keras_ctx *c) {
  char msg[400];
  const char *e = st_last_error(), *p = strstr(e, "): ");
  if (strncmp(e, "layer ", 6) == 0 && p) e = p + 3;
  snprintf(msg, sizeof msg, "%s", e);
  return st__keras_error(c, "%s", msg);
}

/* BatchNormalization, Softmax and LayerNormalization work on the last axis
 * only: -1 or rank. */
static st_status check_axis(const st__keras_ctx *c, const st__keras_layer *k, st_shape in) {
  if (k->axis == -1 || k->axis == in.rank) return ST_OK;
  return st__keras_error(c, "axis %d is not supported (only the last axis, -1 or %d, "
                         "for this input)", k->axis, in.rank);
}

/* Reshape's target with its -1 (if any) resolved against the input size. */
static st_status reshape_target(const st__keras_ctx *c, const st__keras_layer *k,
                                st_shape in, st_shape *t) {
  size_t known = 1, size = st_shape_size(in);
  int free_dim = -1;
  memset(t, 0, sizeof *t);
  t->rank = k->target_rank;
  for (int i = 0; i < k->target_rank; i++) {
    t->dims[i] = k->target[i];
    if (k->target[i] == -1) free_dim = i;
    else if (!st_mul_size(known, (size_t)k->target[i], &known) || known > size) break;
  }
  if (free_dim >= 0 && known <= size && size % known == 0)
    t->dims[free_dim] = (int)(size / known);
  if ((free_dim < 0 && known == size) || (free_dim >= 0 && t->dims[free_dim] > 0))
    return ST_OK;
  char b[64];
  return st__keras_error(c, "target_shape does not fit the input %s (%zu values)",
                         st_shape_format(in, b, sizeof b), size);
}

/* Name a layer whose constructor takes no options (Flatten, Dropout, ...);
 * passes the constructor's status through. */
static st_status named(st_status s, st_layer **l, const char *name) {
  if (s == ST_OK && name[0]) {
    snprintf((*l)->name, sizeof (*l)->name, "%s", name);
    (*l)->named_by_user = true;
  }
  return s;
}

st_status st__keras_make_layer(const st__keras_ctx *c, const st__keras_layer *k, st_shape in,
                               st_layer **out) {
  const char *nm = k->name[0] ? k->name : NULL;
  st_dense_options d = k->u.dense;
  st_conv2d_options cv = k->u.conv;
  st_pool2d_options p = k->u.pool;
  st_batchnorm_options bn = k->u.bn;
  st_zeropad2d_options zp = k->u.zeropad;
  st_relu_options ro = k->u.relu;
  st_conv1d_options k1;
  st_depthwise_conv2d_options dw;
  st_embedding_options em;
  st_layernorm_options ln;
  st_position_embedding_options pe;
  st_mha_options mha = k->u.mha;
  st_shape t;
  st_status s = check_axis(c, k, in); /* axis is -1 unless BN or Softmax set it */
  if (s != ST_OK) return s;
  switch (k->kind) {
  case ST__K_DENSE: d.name = nm; s = st_dense_ex(d, out); break;
  case ST__K_CONV2D: cv.name = nm; s = st_conv2d_ex(cv, out); break;
  case ST__K_MAXPOOL: p.name = nm; s = st_maxpool2d_ex(p, out); break;
  case ST__K_AVGPOOL: p.name = nm; s = st_avgpool2d_ex(p, out); break;
  case ST__K_BATCHNORM: bn.name = nm; s = st_batchnorm_ex(bn, out); break;
  case ST__K_FLATTEN: s = named(st_flatten(out), out, k->name); break;
  case ST__K_DROPOUT: s = named(st_dropout(k->u.rate, out), out, k->name); break;
  case ST__K_ACTIVATION: s = named(st_activation_layer(k->u.act, out), out, k->name); break;
  /* issue 28, helper B */
  case ST__K_CONV1D: k1 = k->u.conv1d, k1.name = nm; s = st_conv1d_ex(k1, out); break;
  case ST__K_DEPTHWISE: dw = k->u.dw, dw.name = nm; s = st_depthwise_conv2d_ex(dw, out); break;
  case ST__K_EMBEDDING: em = k->u.emb, em.name = nm; s = st_embedding_ex(em, out); break;
  case ST__K_LAYERNORM: ln = k->u.ln, ln.name = nm; s = st_layernorm_ex(ln, out); break;
  case ST__K_POSITION_EMBEDDING: pe = k->u.pos, pe.name = nm; s = st_position_embedding_ex(pe, out); break;
  case ST__K_RESHAPE:
    if ((s = reshape_target(c, k, in, &t)) != ST_OK) return s;
    s = named(st_reshape(t, out), out, k->name);
    break;
  /* issue 28, layers-a */
  case ST__K_GLOBAL_AVG2D: s = named(st_global_avgpool2d(out), out, k->name); break;
  case ST__K_GLOBAL_MAX2D: s = named(st_global_maxpool2d(out), out, k->name); break;
  case ST__K_GLOBAL_AVG1D: s = named(st_global_avgpool1d(out), out, k->name); break;
  case ST__K_GLOBAL_MAX1D: s = named(st_global_maxpool1d(out), out, k->name); break;
  case ST__K_ZEROPAD2D: zp.name = nm; s = st_zeropad2d_ex(zp, out); break;
  case ST__K_RELU: ro.name = nm; s = st_relu_ex(ro, out); break;
  case ST__K_LEAKY_RELU:
    s = named(st_leaky_relu(k->u.relu.negative_slope, out), out, k->name);
    break;
  /* end of layers-a */
  /* merge layers and attention (the graph importer wires their inputs) */
  case ST__K_ADD: s = named(st_add(out), out, k->name); break;
  case ST__K_SUBTRACT: s = named(st_subtract(out), out, k->name); break;
  case ST__K_MULTIPLY: s = named(st_multiply(out), out, k->name); break;
  case ST__K_CONCATENATE: s = named(st_concatenate(k->u.concat_axis, out), out, k->name); break;
  case ST__K_MHA:
    mha.name = nm;
    mha.use_causal_mask |= k->causal_mask; /* a functional call's use_causal_mask */
    s = st_multi_head_attention_ex(mha, out);
    break;
  case ST__K_REVERSIBLE_EMBEDDING:
    return st__keras_error(c, "ReversibleEmbedding reads the Embedding '%s': only in a "
                           "functional model", k->tied);
  default: return st__keras_error(c, "internal: unexpected layer kind %d", (int)k->kind);
  }
  return s == ST_OK ? ST_OK : st__keras_rethrow(c);
}

static st_status add_layer(const st__keras_ctx *c, st_model *m, const st__keras_layer *k) {
  st_shape in = st_model_output_shape(m);
  st_layer *l = NULL;
  st_status s = st__keras_make_layer(c, k, in, &l);
  if (s != ST_OK) return s;
  if (st_model_add(m, l) != ST_OK) return st__keras_rethrow(c); /* l is consumed */
  const st_layer *a = st_model_layer(m, st_model_layer_count(m) - 1);
  if (st_layer_param_count(a) > ST__KERAS_MAX_FLOATS ||
      st_shape_size(st_layer_output_shape(a)) > ST__KERAS_MAX_FLOATS)
    return st__keras_error(c, "%zu parameters and %zu output values per example: more "
                           "than the limit of %d", st_layer_param_count(a),
                           st_shape_size(st_layer_output_shape(a)), ST__KERAS_MAX_FLOATS);
  return ST_OK;
}

/* Same name as an earlier layer: say which, before the model is touched. */
static st_status check_names(const st__keras_ctx *c, const st__keras_layer *k, int n) {
  for (int i = 1; i < n; i++)
    for (int j = 0; k[i].name[0] && j < i; j++)
      if (strcmp(k[i].name, k[j].name) == 0) {
        st__keras_ctx lc;
        layer_ctx(c, i, &k[i], &lc);
        return st__keras_error(&lc, "duplicate layer name (also layer %d)", j);
      }
  return ST_OK;
}

/* The Sequential's name when the caller gives none: config "name" if usable. */
static const char *model_name(const st_model_options *o, const json_t *cfg) {
  const char *s = json_string_value(json_object_get(cfg, "name"));
  if (o->name) return o->name;
  bool ok = s && s[0] && strlen(s) < ST_NAME_MAX;
  for (size_t i = 0; ok && s[i]; i++) ok = (unsigned char)s[i] >= 0x20 && s[i] != 0x7f;
  return ok ? s : "sequential";
}

static st_status build(const st__keras_ctx *c, const json_t *cfg, const st__keras_layer *k,
                       int n, st_shape in, const st_model_options *o, st_model **out) {
  st_model_options mo = *o;
  mo.input_shape = in;
  mo.name = model_name(o, cfg);
  st_model *m = NULL;
  st_status s = st_sequential_create(&mo, &m);
  for (int i = 0; s == ST_OK && i < n; i++) {
    if (k[i].kind == ST__K_INPUT) continue;
    st__keras_ctx lc;
    layer_ctx(c, i, &k[i], &lc);
    s = add_layer(&lc, m, &k[i]);
  }
  if (s != ST_OK) {
    st_model_destroy(m);
    return s;
  }
  *out = m;
  return ST_OK;
}

static bool functional(const json_t *root) {
  const char *cls = json_string_value(json_object_get(root, "class_name"));
  return cls && (strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0);
}

static st_status import(const st__keras_ctx *c, const json_t *root,
                        const st_model_options *o, st_model **out) {
  const json_t *cfg = NULL, *layers = NULL;
  const char *mod = json_string_value(json_object_get(root, "module"));
  char b[80];
  if (json_is_object(root) && functional(root)) {
    if (json_object_get(root, "module") && !(mod && strncmp(mod, "keras", 5) == 0))
      return st__keras_error(c, "model module %s is not supported",
                             st__keras_show(json_object_get(root, "module"), b, sizeof b));
    return st__keras_import_functional(c, root, o, out);
  }
  st_status s = layout(c, root, &cfg, &layers);
  if (s != ST_OK) return s;
  int n = (int)json_array_size(layers);
  st__keras_layer *k = calloc((size_t)n, sizeof *k);
  if (!k) return st_error(ST_ERR_NOMEM, "%s: out of memory", c->file);
  for (int i = 0; s == ST_OK && i < n; i++) {
    st__keras_ctx lc = *c;
    lc.index = i;
    s = st__keras_parse_layer(&lc, json_array_get(layers, i), &k[i]);
  }
  st_shape in;
  if (s == ST_OK) s = input_shape(c, cfg, k, n, &in);
  if (s == ST_OK) s = check_names(c, k, n);
  if (s == ST_OK) s = build(c, cfg, k, n, in, o, out);
  free(k);
  return s;
}

st_status st_model_from_keras_json_text(const char *text, size_t len, const char *origin,
                                        const st_model_options *o, st_model **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_model_from_keras_json_text: out is NULL");
  *out = NULL;
  if ((!text && len) || !o)
    return st_error(ST_ERR_INVALID, "st_model_from_keras_json_text: %s is NULL", o ? "text" : "o");
  if (!origin) origin = "Keras JSON";
  if (len > ST__KERAS_MAX_FILE)
    return st_error(ST_ERR_FORMAT, "%s: %zu bytes of JSON (more than the limit of %u)", origin,
                    len, ST__KERAS_MAX_FILE);
  json_error_t je;
  json_t *root = json_loadb(text ? text : "", len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return st_error(ST_ERR_FORMAT, "%s: invalid JSON at line %d, column %d: %s", origin,
                    je.line, je.column, je.text);
  st__keras_ctx c = {.file = origin, .index = -1};
  st_status s = depth_ok(origin, root, 1);
  if (s == ST_OK) s = import(&c, root, o, out);
  json_decref(root);
  return s;
}

st_status st_model_from_keras_json(const char *path, const st_model_options *o,
                                   st_model **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_model_from_keras_json: out is NULL");
  *out = NULL;
  if (!path || !o)
    return st_error(ST_ERR_INVALID, "st_model_from_keras_json: %s is NULL", path ? "o" : "path");
  char *text = NULL;
  size_t len = 0;
  st_status s = st__read_all(path, ST__KERAS_MAX_FILE, &text, &len);
  if (s != ST_OK) return s;
  s = st_model_from_keras_json_text(text, len, path, o, out);
  free(text);
  return s;
}
