/* Keras JSON importer: error messages and the readers of single option values
 * (integers, pairs, booleans, numbers, padding, activations, initializers,
 * dtypes, shapes). Every reader validates type and range and names the option
 * and its value when it refuses. Any thread; no state. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/keras.h"

st_status st__keras_error(const st__keras_ctx *c, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->index < 0) return st_error(ST_ERR_FORMAT, "%s: %s", c->file, msg);
  return st_error(ST_ERR_FORMAT, "%s: layer %d ('%s', %s): %s", c->file, c->index,
                  c->name, c->cls[0] ? c->cls : "?", msg);
}

const char *st__keras_clean(const char *s, char *buf, size_t n) {
  size_t i = 0;
  for (; s && s[i] && i + 1 < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    buf[i] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
  }
  buf[i] = 0;
  if (s && s[i] && n > 4) memcpy(buf + n - 4, "...", 4);
  return buf;
}

const char *st__keras_show(const json_t *v, char *buf, size_t n) {
  if (!v) return st__keras_clean("(absent)", buf, n);
  char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
  st__keras_clean(d ? d : "(unprintable)", buf, n);
  free(d);
  return buf;
}

st_status st__keras_int(const st__keras_ctx *c, const json_t *cfg, const char *key,
                        long long lo, long long hi, int def, bool required, int *out) {
  const json_t *v = json_object_get(cfg, key);
  char b[80];
  if (!v || json_is_null(v)) {
    if (required) return st__keras_error(c, "missing option '%s'", key);
    *out = def;
    return ST_OK;
  }
  if (!json_is_integer(v))
    return st__keras_error(c, "%s %s is not an integer", key,
                           st__keras_show(v, b, sizeof b));
  long long x = (long long)json_integer_value(v);
  if (x < lo || x > hi)
    return st__keras_error(c, "%s %lld is out of range (%lld..%lld)", key, x, lo, hi);
  *out = (int)x;
  return ST_OK;
}

st_status st__keras_pair(const st__keras_ctx *c, const json_t *cfg, const char *key,
                         int lo, int hi, int def, bool null_ok, int out[2]) {
  const json_t *v = json_object_get(cfg, key);
  char b[80];
  if (!v || (null_ok && json_is_null(v))) {
    out[0] = out[1] = v ? 0 : def;
    return ST_OK;
  }
  const json_t *e[2] = {v, v};
  if (json_is_array(v) && json_array_size(v) == 2) {
    e[0] = json_array_get(v, 0);
    e[1] = json_array_get(v, 1);
  }
  for (int i = 0; i < 2; i++) {
    if (!json_is_integer(e[i]) || json_integer_value(e[i]) < lo ||
        json_integer_value(e[i]) > hi)
      return st__keras_error(c, "%s %s is not supported (expected an integer or "
                             "two integers in %d..%d)", key,
                             st__keras_show(v, b, sizeof b), lo, hi);
    out[i] = (int)json_integer_value(e[i]);
  }
  return ST_OK;
}

st_status st__keras_ones(const st__keras_ctx *c, const json_t *cfg, const char *key) {
  const json_t *v = json_object_get(cfg, key);
  char b[80];
  bool ok = !v || (json_is_integer(v) && json_integer_value(v) == 1);
  if (!ok && json_is_array(v) && json_array_size(v) >= 1) {
    ok = true;
    for (size_t i = 0; i < json_array_size(v); i++) {
      const json_t *e = json_array_get(v, i);
      ok = ok && json_is_integer(e) && json_integer_value(e) == 1;
    }
  }
  if (!ok)
    return st__keras_error(c, "%s %s is not supported (only 1)", key,
                           st__keras_show(v, b, sizeof b));
  return ST_OK;
}

st_status st__keras_bool(const st__keras_ctx *c, const json_t *cfg, const char *key,
                         bool def, bool *out) {
  const json_t *v = json_object_get(cfg, key);
  char b[80];
  if (!v) {
    *out = def;
    return ST_OK;
  }
  if (!json_is_boolean(v))
    return st__keras_error(c, "%s %s is not a boolean", key,
                           st__keras_show(v, b, sizeof b));
  *out = json_is_true(v);
  return ST_OK;
}

st_status st__keras_false(const st__keras_ctx *c, const json_t *cfg, const char *key) {
  const json_t *v = json_object_get(cfg, key);
  char b[80];
  if (v && !json_is_false(v) && !json_is_null(v))
    return st__keras_error(c, "%s %s is not supported (only false)", key,
                           st__keras_show(v, b, sizeof b));
  return ST_OK;
}

st_status st__keras_null(const st__keras_ctx *c, const json_t *cfg, const char *key) {
  const json_t *v = json_object_get(cfg, key);
  char b[80];
  if (v && !json_is_null(v))
    return st__keras_error(c, "%s %s is not supported (only null)", key,
                           st__keras_show(v, b, sizeof b));
  return ST_OK;
}

st_status st__keras_float(const st__keras_ctx *c, const json_t *cfg, const char *key,
                          double lo, double hi, double def, float *out) {
  const json_t *v = json_object_get(cfg, key);
  char b[80];
  if (!v) {
    *out = (float)def;
    return ST_OK;
  }
  double x = json_number_value(v);
  if (!json_is_number(v) || !isfinite(x) || x < lo || x > hi)
    return st__keras_error(c, "%s %s is not supported (expected a number in "
                           "%g..%g)", key, st__keras_show(v, b, sizeof b), lo, hi);
  *out = (float)x;
  return ST_OK;
}

st_status st__keras_padding(const st__keras_ctx *c, const json_t *cfg, st_padding *out) {
  const json_t *v = json_object_get(cfg, "padding");
  const char *s = json_string_value(v);
  char b[80];
  if (!v || (s && strcmp(s, "valid") == 0)) {
    *out = ST_PAD_VALID;
  } else if (s && strcmp(s, "same") == 0) {
    *out = ST_PAD_SAME;
  } else {
    return st__keras_error(c, "padding %s is not supported (valid, same)",
                           st__keras_show(v, b, sizeof b));
  }
  return ST_OK;
}

st_status st__keras_data_format(const st__keras_ctx *c, const json_t *cfg) {
  const json_t *v = json_object_get(cfg, "data_format");
  const char *s = json_string_value(v);
  char b[80];
  if (v && !json_is_null(v) && !(s && strcmp(s, "channels_last") == 0))
    return st__keras_error(c, "data_format %s is not supported (only channels_last)",
                           st__keras_show(v, b, sizeof b));
  return ST_OK;
}

st_status st__keras_activation(const st__keras_ctx *c, const json_t *cfg,
                               const char *key, st_activation *out) {
  const json_t *v = json_object_get(cfg, key);
  char b[80];
  *out = ST_ACT_LINEAR;
  if (!v || json_is_null(v)) return ST_OK;
  const json_t *name = v;
  if (json_is_object(v)) /* Keras 3 {"class_name": "function", "config": "relu"} */
    name = json_object_get(v, "config");
  const char *s = json_string_value(name);
  for (int i = 0; s && i < ST_ACT_COUNT; i++)
    if (strcmp(s, st_activation_name((st_activation)i)) == 0) {
      *out = (st_activation)i;
      return ST_OK;
    }
  return st__keras_error(c, "%s %s is not supported (linear, relu, sigmoid, tanh, "
                         "softmax, elu, gelu, relu6, leaky_relu, gelu_approximate)", key, st__keras_show(v, b, sizeof b));
}

static const struct {
  const char *snake, *camel;
  st_init init;
} k_inits[] = {
    {"glorot_uniform", "GlorotUniform", ST_INIT_GLOROT_UNIFORM},
    {"he_normal", "HeNormal", ST_INIT_HE_NORMAL},
    {"zeros", "Zeros", ST_INIT_ZEROS},
    {"ones", "Ones", ST_INIT_ONES},
    {"random_uniform", "RandomUniform", ST_INIT_RANDOM_UNIFORM},
};

static bool init_lookup(const char *s, st_init *out) {
  for (size_t i = 0; s && i < sizeof k_inits / sizeof k_inits[0]; i++)
    if (strcmp(s, k_inits[i].snake) == 0 || strcmp(s, k_inits[i].camel) == 0) {
      *out = k_inits[i].init;
      return true;
    }
  return false;
}

/* RandomUniform's minval/maxval: only Keras's defaults -0.05 and 0.05. */
static bool uniform_bound_ok(const char *k, const json_t *e) {
  double want = strcmp(k, "minval") == 0 ? -0.05 : 0.05;
  return json_is_number(e) && fabs(json_number_value(e) - want) < 1e-12;
}

/* The dict form's extras: module keras.*, registered_name null, config with at
 * most a null or integer seed (and RandomUniform's default bounds). */
static bool init_dict_ok(const json_t *v) {
  const char *mod = json_string_value(json_object_get(v, "module"));
  const json_t *reg = json_object_get(v, "registered_name");
  const json_t *cfg = json_object_get(v, "config");
  if (json_object_get(v, "module") && !(mod && strncmp(mod, "keras", 5) == 0)) return false;
  if (reg && !json_is_null(reg)) return false;
  if (cfg && !json_is_object(cfg)) return false;
  const char *k;
  const json_t *e;
  json_object_foreach((json_t *)cfg, k, e) {
    bool uniform = strcmp(json_string_value(json_object_get(v, "class_name")), "RandomUniform") == 0;
    if (uniform && (strcmp(k, "minval") == 0 || strcmp(k, "maxval") == 0)) {
      if (!uniform_bound_ok(k, e)) return false;
      continue;
    }
    if (strcmp(k, "seed") != 0 || !(json_is_null(e) || json_is_integer(e))) return false;
  }
  const char *key;
  json_object_foreach((json_t *)v, key, e) {
    if (strcmp(key, "module") && strcmp(key, "class_name") && strcmp(key, "config") &&
        strcmp(key, "registered_name"))
      return false;
  }
  return true;
}

st_status st__keras_init(const st__keras_ctx *c, const json_t *cfg, const char *key,
                         st_init def, st_init *out) {
  const json_t *v = json_object_get(cfg, key);
  char b[120];
  *out = def;
  if (!v) return ST_OK;
  const char *s = json_is_object(v) ? json_string_value(json_object_get(v, "class_name"))
                                    : json_string_value(v);
  if (init_lookup(s, out) && (!json_is_object(v) || init_dict_ok(v))) return ST_OK;
  return st__keras_error(c, "%s %s is not supported (glorot_uniform, he_normal, "
                         "zeros, ones, random_uniform in [-0.05, 0.05]; config may "
                         "hold only a seed)", key,
                         st__keras_show(v, b, sizeof b));
}

st_status st__keras_dtype(const st__keras_ctx *c, const json_t *v) {
  char b[120];
  if (!v || json_is_null(v)) return ST_OK;
  const char *s = json_string_value(v);
  if (json_is_object(v)) { /* {"class_name": "DTypePolicy", "config": {"name": ...}} */
    const char *cls = json_string_value(json_object_get(v, "class_name"));
    if (cls && (strcmp(cls, "DTypePolicy") == 0 || strcmp(cls, "Policy") == 0 ||
                strcmp(cls, "FloatDTypePolicy") == 0))
      s = json_string_value(json_object_get(json_object_get(v, "config"), "name"));
  }
  if (s && strcmp(s, "float32") == 0) return ST_OK;
  return st__keras_error(c, "dtype %s is not supported (only float32)",
                         st__keras_show(v, b, sizeof b));
}

st_status st__keras_axis(const st__keras_ctx *c, const json_t *cfg, int def, int *out) {
  const json_t *v = json_object_get(cfg, "axis");
  char b[80];
  *out = def;
  if (!v) return ST_OK;
  const json_t *e = v;
  if (json_is_array(v)) e = json_array_size(v) == 1 ? json_array_get(v, 0) : NULL;
  if (!json_is_integer(e) || json_integer_value(e) < -1 ||
      json_integer_value(e) > ST_MAX_RANK)
    return st__keras_error(c, "axis %s is not supported (only the last axis, -1)",
                           st__keras_show(v, b, sizeof b));
  *out = (int)json_integer_value(e);
  return ST_OK;
}

/* One dimension of a batch shape: a positive integer up to the float cap. */
static bool dim_ok(const json_t *e) {
  return json_is_integer(e) && json_integer_value(e) > 0 &&
         json_integer_value(e) <= ST__KERAS_MAX_FLOATS;
}

st_status st__keras_shape(const st__keras_ctx *c, const char *key, const json_t *v,
                          st_shape *out) {
  char b[120];
  size_t n = json_array_size(v);
  if (!json_is_array(v) || n < 2 || n > ST_MAX_RANK + 1)
    return st__keras_error(c, "%s %s is not supported (expected [batch, d1, ..., dk] "
                           "with k in 1..%d)", key, st__keras_show(v, b, sizeof b),
                           ST_MAX_RANK);
  const json_t *batch = json_array_get(v, 0);
  if (!json_is_null(batch) && !dim_ok(batch))
    return st__keras_error(c, "%s %s: batch dimension must be null or positive", key,
                           st__keras_show(v, b, sizeof b));
  long long total = 1;
  memset(out, 0, sizeof *out);
  out->rank = (int)n - 1;
  for (size_t i = 1; i < n; i++) {
    const json_t *e = json_array_get(v, i);
    if (!dim_ok(e))
      return st__keras_error(c, "%s %s: dimension %zu must be a positive integer", key,
                             st__keras_show(v, b, sizeof b), i);
    total *= json_integer_value(e); /* each factor <= 2^30 and total <= 2^30 */
    if (total > ST__KERAS_MAX_FLOATS)
      return st__keras_error(c, "%s %s has more than %d values per example", key,
                             st__keras_show(v, b, sizeof b), ST__KERAS_MAX_FLOATS);
    out->dims[i - 1] = (int)json_integer_value(e);
  }
  return ST_OK;
}
