/* Keras model import (st_model_from_keras_json; _text from memory): the
 * hand-written fixtures in tests/keras/ build the same models as the
 * built-ins (Keras 2 and 3 layouts),
 * the mixed fixture exercises every other supported layer, and every bad
 * input — fixture or generated here (deep nesting, an oversized file, odd
 * options) — is ST_ERR_FORMAT with a message naming the file and the fact. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "strata/strata.h"

static char g_dir[512];  /* tests/keras */
static char g_tmp[512];  /* scratch directory for generated files */

static const char *fixture(const char *name) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  return path;
}

/* keep_name: o.name = NULL, so the config's model name is used. */
static st_model *load_ex(const char *path, bool keep_name) {
  st_model_options o = st_model_default_options(st_shape1(1));
  if (keep_name) o.name = NULL;
  st_model *m = NULL;
  st_status s = st_model_from_keras_json(path, &o, &m);
  CHECK_MSG(s == ST_OK && m, "%s: %s", path, st_last_error());
  return s == ST_OK ? m : NULL;
}
static st_model *load(const char *path) { return load_ex(path, false); }

static st_model *builtin(const char *name) {
  st_model_options o = st_model_default_options(st_shape1(1));
  st_model *m = NULL;
  CHECK_OK(st_builtin_model_create(name, &o, &m));
  return m;
}

/* Same classes, output shapes and parameter counts (names too if asked). */
static void check_same_layers(const st_model *a, const st_model *b, bool names) {
  CHECK(st_model_layer_count(a) == st_model_layer_count(b));
  for (int i = 0; i < st_model_layer_count(a) && i < st_model_layer_count(b); i++) {
    const st_layer *x = st_model_layer(a, i), *y = st_model_layer(b, i);
    CHECK_MSG(strcmp(st_layer_class(x), st_layer_class(y)) == 0, "layer %d: %s vs %s", i,
              st_layer_class(x), st_layer_class(y));
    CHECK_MSG(st_shape_equal(st_layer_output_shape(x), st_layer_output_shape(y)),
              "layer %d shape", i);
    CHECK_MSG(st_layer_param_count(x) == st_layer_param_count(y), "layer %d params", i);
    if (names)
      CHECK_MSG(strcmp(st_layer_name(x), st_layer_name(y)) == 0, "layer %d: %s vs %s", i,
                st_layer_name(x), st_layer_name(y));
  }
  CHECK(st_model_param_count(a, false) == st_model_param_count(b, false));
}

static void check_compiles(st_model *m) {
  st_compile_options co = st_compile_default_options();
  CHECK_OK(st_model_compile(m, &co));
}

static void test_cnn(void) {
  st_model *ref = builtin("cnn");
  st_model *k2 = load(fixture("cnn_keras2.json"));
  st_model *k3 = load(fixture("cnn_keras3.json"));
  if (ref && k2 && k3) {
    char *sr = NULL, *s2 = NULL, *s3 = NULL;
    CHECK_OK(st_model_summary(ref, &sr));
    CHECK_OK(st_model_summary(k2, &s2));
    CHECK_OK(st_model_summary(k3, &s3));
    /* the fixtures use Keras's automatic names, which are Strata's too */
    CHECK_MSG(strcmp(sr, s3) == 0, "summaries differ:\n%s\n%s", sr, s3);
    CHECK(strcmp(s2, s3) == 0);
    CHECK(strstr(s3, "Total params: 225,034") != NULL);
    free(sr), free(s2), free(s3);
    check_same_layers(k2, k3, true);
    check_same_layers(ref, k3, true);
    CHECK(st_model_param_count(k3, false) == 225034);
    check_compiles(k2);
    check_compiles(k3);
  }
  st_model_destroy(ref), st_model_destroy(k2), st_model_destroy(k3);
}

static void test_mlp(void) {
  st_model *ref = builtin("mlp");
  st_model *k3 = load(fixture("mlp_keras3.json"));
  st_model *k2 = load(fixture("mlp_keras2.json")); /* no InputLayer, Keras 2.2 names */
  if (ref && k2 && k3) {
    check_same_layers(ref, k3, true);
    check_same_layers(ref, k2, false);
    CHECK(strcmp(st_layer_name(st_model_layer(k2, 1)), "dense_1") == 0);
    check_compiles(k2);
  }
  st_model_destroy(ref), st_model_destroy(k2), st_model_destroy(k3);
}

static void check_layer(const st_model *m, int i, const char *name, const char *cls,
                        st_shape shape, size_t params) {
  const st_layer *l = st_model_layer(m, i);
  if (!l) {
    CHECK_MSG(l, "layer %d missing", i);
    return;
  }
  char b[64];
  CHECK_MSG(strcmp(st_layer_name(l), name) == 0, "layer %d name %s", i, st_layer_name(l));
  CHECK_MSG(strcmp(st_layer_class(l), cls) == 0, "layer %d class %s", i, st_layer_class(l));
  CHECK_MSG(st_shape_equal(st_layer_output_shape(l), shape), "layer %d shape %s", i,
            st_shape_format(st_layer_output_shape(l), b, sizeof b));
  CHECK_MSG(st_layer_param_count(l) == params, "layer %d params %zu", i,
            st_layer_param_count(l));
}

static void test_mixed(void) {
  st_model *m = load_ex(fixture("mixed_keras3.json"), true);
  if (!m) return;
  CHECK(st_model_layer_count(m) == 12);
  check_layer(m, 0, "to_image", "Reshape", st_shape3(28, 28, 1), 0);
  check_layer(m, 1, "conv", "Conv2D", st_shape3(14, 14, 16), 5 * 5 * 16 + 16);
  check_layer(m, 2, "bn", "BatchNormalization", st_shape3(14, 14, 16), 64);
  check_layer(m, 3, "relu", "Activation", st_shape3(14, 14, 16), 0);
  check_layer(m, 4, "avg", "AveragePooling2D", st_shape3(7, 7, 16), 0);
  check_layer(m, 5, "regroup", "Reshape", (st_shape){2, {49, 16}}, 0);
  check_layer(m, 6, "flat", "Flatten", st_shape1(784), 0);
  check_layer(m, 7, "drop", "Dropout", st_shape1(784), 0);
  check_layer(m, 8, "hidden", "Dense", st_shape1(64), 784 * 64 + 64);
  check_layer(m, 9, "act_tanh", "Activation", st_shape1(64), 0);
  check_layer(m, 10, "logits", "Dense", st_shape1(10), 650);
  check_layer(m, 11, "probs", "Activation", st_shape1(10), 0);
  CHECK(st_model_param_count(m, true) == st_model_param_count(m, false) - 32);
  char *s = NULL;
  CHECK_OK(st_model_summary(m, &s));
  CHECK(s && strstr(s, "Model: \"mixed\"") && strstr(s, "probs (Activation)"));
  free(s);
  check_compiles(m);
  st_model_destroy(m);
}

/* path must fail with ST_ERR_FORMAT (or want) and a message holding every
 * substring (NULL-terminated list), including the file's base name. */
static void expect_fail(const char *path, st_status want, const char *const *subs) {
  st_model_options o = st_model_default_options(st_shape1(1));
  st_model *m = NULL;
  st_status s = st_model_from_keras_json(path, &o, &m);
  const char *msg = st_last_error(), *base = strrchr(path, '/');
  CHECK_MSG(s == want && m == NULL, "%s: got %s (%s)", path, st_status_string(s), msg);
  CHECK_MSG(strstr(msg, base ? base + 1 : path), "%s: message lacks the file: %s", path, msg);
  for (int i = 0; subs[i]; i++)
    CHECK_MSG(strstr(msg, subs[i]), "%s: message lacks '%s': %s", path, subs[i], msg);
  st_model_destroy(m);
}
#define EXPECT_FAIL(path, ...) \
  expect_fail(path, ST_ERR_FORMAT, (const char *const[]){__VA_ARGS__, NULL})

static void test_bad_fixtures(void) {
  EXPECT_FAIL(fixture("bad_invalid.json"), "invalid JSON", "line 3");
  EXPECT_FAIL(fixture("bad_duplicate.json"), "invalid JSON", "duplicate");
  EXPECT_FAIL(fixture("bad_lstm.json"), "layer 5 ('lstm', LSTM)", "'LSTM' is not supported");
  EXPECT_FAIL(fixture("bad_units_huge.json"), "layer 2 ('dense', Dense)",
              "units 1000000000000 is out of range");
  EXPECT_FAIL(fixture("bad_units_negative.json"), "layer 2 ('dense', Dense)", "units -5");
  EXPECT_FAIL(fixture("bad_units_zero.json"), "layer 3 ('dense_1', Dense)", "units 0");
  EXPECT_FAIL(fixture("bad_dilation.json"),
              "layer 3 ('conv2d_1', Conv2D): dilation_rate [2, 2] is not supported (only 1)");
  EXPECT_FAIL(fixture("bad_activation.json"), "layer 6 ('dense', Dense)",
              "activation \"swish\" is not supported");
  EXPECT_FAIL(fixture("bad_no_input.json"), "no input shape");
  EXPECT_FAIL(fixture("bad_channels_first.json"), "layer 1 ('conv2d', Conv2D)",
              "data_format \"channels_first\" is not supported");
  EXPECT_FAIL(fixture("bad_regularizer.json"), "layer 6 ('dense', Dense)",
              "kernel_regularizer", "only null");
  const char *const io[] = {"cannot open", NULL};
  expect_fail(fixture("no_such_file.json"), ST_ERR_IO, io);
}

/* Write text to g_tmp/name and return the path. */
static const char *write_tmp(const char *name, const char *text, size_t len) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/%s", g_tmp, name);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f) {
    CHECK(fwrite(text, 1, len, f) == len);
    fclose(f);
  }
  return path;
}

/* A small Keras 3-style model: an InputLayer of batch shape `shape`, then
 * `layers` (a JSON list body). */
static const char *model_tmp(const char *name, const char *shape, const char *layers) {
  static char text[8192];
  snprintf(text, sizeof text,
           "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": "
           "{\"name\": \"s\", \"layers\": [{\"class_name\": \"InputLayer\", \"config\": "
           "{\"batch_shape\": %s, \"dtype\": \"float32\", \"name\": \"in\"}}, %s]}}",
           shape, layers);
  return write_tmp(name, text, strlen(text));
}

#define DENSE(name, units) \
  "{\"class_name\": \"Dense\", \"config\": {\"name\": \"" name "\", \"units\": " #units "}}"

static void test_generated(void) {
  /* a good one first: the template itself works, integer seeds are ignored */
  st_model *m = load(model_tmp("ok.json", "[null, 8]",
      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4, "
      "\"kernel_initializer\": {\"class_name\": \"HeNormal\", \"config\": {\"seed\": 7}}}}"));
  CHECK(m && st_model_param_count(m, false) == 36);
  st_model_destroy(m);
  EXPECT_FAIL(model_tmp("dup_name.json", "[null, 8]", DENSE("d", 4) ", " DENSE("d", 2)),
              "layer 2 ('d', Dense)", "duplicate layer name (also layer 1)");
  EXPECT_FAIL(model_tmp("overflow.json", "[null, 1073741824, 1073741824]", DENSE("d", 4)),
              "batch_shape", "more than 1073741824 values");
  EXPECT_FAIL(model_tmp("neg_dim.json", "[null, -3]", DENSE("d", 4)), "dimension 1");
  EXPECT_FAIL(model_tmp("real_units.json", "[null, 8]", DENSE("d", 1e12)),
              "layer 1 ('d', Dense)", "units 1000000000000.0 is not an integer");
  EXPECT_FAIL(model_tmp("kernel.json", "[null, 8, 8, 1]",
      "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
      "\"kernel_size\": 5000}}"), "layer 1 ('c', Conv2D)", "kernel_size 5000");
  EXPECT_FAIL(model_tmp("nofit.json", "[null, 2, 2, 1]",
      "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
      "\"kernel_size\": 3}}"), "layer 1 ('c', Conv2D)", "does not fit");
  { /* Dense on an image works on its last axis, as Keras: (None, 4, 4, 1) -> (None, 4, 4, 4) */
    st_model_options o = st_model_default_options(st_shape1(1));
    st_model *m = NULL;
    CHECK_OK(st_model_from_keras_json(model_tmp("flat_dense.json", "[null, 4, 4, 1]",
                                                DENSE("d", 4)), &o, &m));
    CHECK(m && st_shape_equal(st_model_output_shape(m), st_shape3(4, 4, 4)));
    st_model_destroy(m);
  }
  EXPECT_FAIL(model_tmp("reshape.json", "[null, 10]",
      "{\"class_name\": \"Reshape\", \"config\": {\"name\": \"r\", \"target_shape\": [-1, 3]}}"),
      "layer 1 ('r', Reshape)", "does not fit");
}

/* Options Strata cannot honour, and entries that are not plain Keras layers. */
static void test_generated_options(void) {
  EXPECT_FAIL(model_tmp("bn_axis.json", "[null, 4, 4, 3]",
      "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"b\", \"axis\": 1}}"),
      "layer 1 ('b', BatchNormalization)", "axis 1");
  EXPECT_FAIL(model_tmp("bn_init.json", "[null, 3]",
      "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"b\", "
      "\"gamma_initializer\": \"zeros\"}}"), "gamma_initializer 'zeros'");
  EXPECT_FAIL(model_tmp("dtype.json", "[null, 8]",
      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4, \"dtype\": "
      "{\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": {\"name\": "
      "\"mixed_float16\"}}}}"), "layer 1 ('d', Dense)", "dtype", "only float32");
  EXPECT_FAIL(model_tmp("frozen.json", "[null, 8]",
      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4, "
      "\"trainable\": false}}"), "trainable false");
  EXPECT_FAIL(model_tmp("unknown_opt.json", "[null, 8]",
      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4, \"bogus\": 1}}"),
      "option 'bogus' is not supported");
  EXPECT_FAIL(model_tmp("custom.json", "[null, 8]",
      "{\"module\": \"my_package\", \"class_name\": \"Dense\", \"config\": {\"units\": 4}}"),
      "layer 1 ('', Dense)", "module \"my_package\"");
  EXPECT_FAIL(model_tmp("relu6.json", "[null, 8]",
      "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"r\", \"max_value\": -6.0}}"),
      "layer 1 ('r', ReLU)", "max_value -6.0");
  EXPECT_FAIL(model_tmp("badname.json", "[null, 8]",
      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"a/b\", \"units\": 4}}"),
      "layer name is not supported");
  EXPECT_FAIL(model_tmp("late_input.json", "[null, 8]",
      DENSE("d", 4) ", {\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4]}}"),
      "layer 2", "InputLayer must be the first layer");
  const char *f = "{\"class_name\": \"Functional\", \"config\": {\"layers\": []}}";
  EXPECT_FAIL(write_tmp("functional.json", f, strlen(f)), "config.layers", "2..10000 layers");
  const char *g = "{\"class_name\": \"Graph\", \"config\": {\"layers\": []}}";
  EXPECT_FAIL(write_tmp("graph.json", g, strlen(g)), "Sequential, Functional or Model");
}

/* ---- issue 28, layers-a: global pooling, ZeroPadding2D, ReLU, LeakyReLU ---- */
#define LAYER(cls, name, cfg) \
  "{\"class_name\": \"" cls "\", \"config\": {\"name\": \"" name "\"" cfg "}}"

static void test_layers_a(void) {
  st_model *m = load(model_tmp("a2d.json", "[null, 6, 5, 2]",
      LAYER("ZeroPadding2D", "zp", ", \"padding\": [[1, 0], [2, 1]]") ", "
      LAYER("ZeroPadding2D", "zp2", ", \"padding\": [1, 2], \"data_format\": \"channels_last\"")
      ", " LAYER("ZeroPadding2D", "zp3", "") ", "
      LAYER("ReLU", "relu6", ", \"max_value\": 6.0, \"negative_slope\": 0.0, \"threshold\": 0.0")
      ", " LAYER("ReLU", "plain", ", \"max_value\": null") ", "
      LAYER("LeakyReLU", "leaky2", ", \"alpha\": 0.1") ", "
      LAYER("LeakyReLU", "leaky3", ", \"negative_slope\": 0.2") ", "
      LAYER("Activation", "r6", ", \"activation\": \"relu6\"") ", "
      LAYER("GlobalMaxPooling2D", "gmp", ", \"keepdims\": false")));
  if (m) {
    check_layer(m, 0, "zp", "ZeroPadding2D", st_shape3(7, 8, 2), 0);
    check_layer(m, 1, "zp2", "ZeroPadding2D", st_shape3(9, 12, 2), 0);
    check_layer(m, 2, "zp3", "ZeroPadding2D", st_shape3(11, 14, 2), 0);
    check_layer(m, 3, "relu6", "ReLU", st_shape3(11, 14, 2), 0);
    check_layer(m, 4, "plain", "Activation", st_shape3(11, 14, 2), 0); /* as before */
    check_layer(m, 5, "leaky2", "LeakyReLU", st_shape3(11, 14, 2), 0);
    check_layer(m, 6, "leaky3", "LeakyReLU", st_shape3(11, 14, 2), 0);
    check_layer(m, 7, "r6", "Activation", st_shape3(11, 14, 2), 0);
    check_layer(m, 8, "gmp", "GlobalMaxPooling2D", st_shape1(2), 0);
    st_layer_options lo;
    CHECK_OK(st_layer_get_options(st_model_layer(m, 0), &lo));
    CHECK(lo.zeropad2d.top == 1 && lo.zeropad2d.bottom == 0 && lo.zeropad2d.left == 2 &&
          lo.zeropad2d.right == 1);
    CHECK_OK(st_layer_get_options(st_model_layer(m, 3), &lo));
    CHECK(lo.relu.max_value == 6.0f && lo.relu.negative_slope == 0.0f);
    CHECK_OK(st_layer_get_options(st_model_layer(m, 5), &lo));
    CHECK(lo.relu.negative_slope == 0.1f);
    CHECK_OK(st_layer_get_options(st_model_layer(m, 7), &lo));
    CHECK(lo.activation == ST_ACT_RELU6);
    check_compiles(m);
  }
  st_model_destroy(m);
  m = load(model_tmp("a1d.json", "[null, 5, 3]",
      LAYER("GlobalAveragePooling1D", "gap", "") ", "
      LAYER("Dense", "d", ", \"units\": 2, \"activation\": \"gelu_approximate\"")));
  if (m) {
    check_layer(m, 0, "gap", "GlobalAveragePooling1D", st_shape1(3), 0);
    check_layer(m, 1, "d", "Dense", st_shape1(2), 8);
  }
  st_model_destroy(m);
  EXPECT_FAIL(model_tmp("keepdims.json", "[null, 4, 4, 3]",
      LAYER("GlobalAveragePooling2D", "g", ", \"keepdims\": true")),
      "layer 1 ('g', GlobalAveragePooling2D)", "keepdims true is not supported");
  EXPECT_FAIL(model_tmp("gap_rank.json", "[null, 4, 3]", LAYER("GlobalMaxPooling2D", "g", "")),
      "layer 1 ('g', GlobalMaxPooling2D)", "expects input (None, h, w, c)");
  EXPECT_FAIL(model_tmp("zp_bad.json", "[null, 4, 4, 3]",
      LAYER("ZeroPadding2D", "z", ", \"padding\": [[1, 2, 3], [0, 0]]")),
      "layer 1 ('z', ZeroPadding2D)", "padding [[1, 2, 3], [0, 0]] is not supported");
  EXPECT_FAIL(model_tmp("zp_neg.json", "[null, 4, 4, 3]",
      LAYER("ZeroPadding2D", "z", ", \"padding\": -1")), "padding -1 is not supported");
  EXPECT_FAIL(model_tmp("leaky_both.json", "[null, 4]",
      LAYER("LeakyReLU", "l", ", \"alpha\": 0.1, \"negative_slope\": 0.1")),
      "layer 1 ('l', LeakyReLU)", "both negative_slope and alpha");
  EXPECT_FAIL(model_tmp("relu_thr.json", "[null, 4]",
      LAYER("ReLU", "r", ", \"threshold\": -1")), "threshold -1");
}
/* ---- end of layers-a ---- */

/* Many layers, deep nesting and a big file, built at run time. */
static void test_limits(void) {
  size_t n = 10001, cap = n * 64 + 256, len = 0;
  char *text = malloc(cap);
  len += (size_t)snprintf(text, cap, "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [");
  for (size_t i = 0; i < n; i++)
    len += (size_t)snprintf(text + len, cap - len, "%s{\"class_name\": \"Flatten\", "
                            "\"config\": {}}", i ? ", " : "");
  len += (size_t)snprintf(text + len, cap - len, "]}}");
  EXPECT_FAIL(write_tmp("many.json", text, len), "10001 layers");
  free(text);

  size_t depth = 100000;
  text = malloc(2 * depth);
  memset(text, '[', depth);
  memset(text + depth, ']', depth);
  EXPECT_FAIL(write_tmp("deep.json", text, 2 * depth), "invalid JSON", "depth");
  free(text);

  /* within jansson's limit but past ours: a nested list inside a config */
  char nested[512];
  int d = 70, p = 0;
  p += snprintf(nested + p, sizeof nested - p,
                "{\"class_name\": \"Dense\", \"config\": {\"units\": 4, \"x\": ");
  for (int i = 0; i < d; i++) nested[p++] = '[';
  for (int i = 0; i < d; i++) nested[p++] = ']';
  snprintf(nested + p, sizeof nested - p, "}}");
  EXPECT_FAIL(model_tmp("nested.json", "[null, 8]", nested), "nested deeper than 64");

  size_t big = (16u << 20) + 1;
  text = malloc(big);
  memset(text, ' ', big);
  EXPECT_FAIL(write_tmp("big.json", text, big), "16 MiB");
  free(text);
}

/* st_model_from_keras_json_text: the same model as from the file (the text
 * need not end in a NUL); errors name the caller's origin where the file's
 * path would be, with the layer and field. */
static void test_text(void) {
  FILE *f = fopen(fixture("mixed_keras3.json"), "rb");
  CHECK(f != NULL);
  if (!f) return;
  char *text = malloc(1 << 16);
  size_t n = text ? fread(text, 1, (1 << 16) - 8, f) : 0;
  fclose(f);
  CHECK(n > 0 && n < (1 << 16) - 8);
  memcpy(text + n, "garbage", 7); /* past len: never read */
  st_model_options o = st_model_default_options(st_shape1(1));
  o.name = NULL;
  st_model *a = NULL, *b = load_ex(fixture("mixed_keras3.json"), true);
  CHECK_OK(st_model_from_keras_json_text(text, n, "mixed text", &o, &a));
  if (a && b) check_same_layers(a, b, true);
  st_model_destroy(a), st_model_destroy(b);
  free(text);

  static const char *const bad[][3] = {
      {"{\"class_name\": \"Sequential\", \"config\": {\"layers\": [", "my model: invalid JSON",
       "line 1"},
      {"{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": \"InputLayer\", "
       "\"config\": {\"batch_shape\": [null, 4]}}, {\"class_name\": \"Dense\", \"config\": "
       "{\"name\": \"d\", \"units\": \"x\"}}]}}",
       "my model: layer 1 ('d', Dense)", "units"},
      {"[1, 2]", "my model: top level is not a JSON object", ""},
      {"", "my model: invalid JSON", ""}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    st_model *m = (st_model *)&o; /* set to NULL on failure */
    st_status s = st_model_from_keras_json_text(bad[i][0], strlen(bad[i][0]), "my model", &o, &m);
    const char *msg = st_last_error();
    CHECK_MSG(s == ST_ERR_FORMAT && m == NULL, "case %zu: %s (%s)", i, st_status_string(s), msg);
    CHECK_MSG(strstr(msg, bad[i][1]) && strstr(msg, bad[i][2]), "case %zu: %s", i, msg);
  }
  st_model *m = NULL;
  CHECK(st_model_from_keras_json_text("{", 1, NULL, &o, &m) == ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "Keras JSON: invalid JSON") != NULL);
  CHECK(st_model_from_keras_json_text(NULL, 5, "x", &o, &m) == ST_ERR_INVALID);
  CHECK(st_model_from_keras_json_text("{}", 2, "x", NULL, &m) == ST_ERR_INVALID);
  CHECK(st_model_from_keras_json_text("{}", 2, "x", &o, NULL) == ST_ERR_INVALID);
  CHECK(st_model_from_keras_json_text("{}", (16u << 20) + 1, "big", &o, &m) == ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "big: ") != NULL && m == NULL);
}

/* st_layer_get_options gives back what the importer passed the constructors. */
static void test_layer_options(void) {
  st_model *m = load_ex(fixture("mixed_keras3.json"), true);
  if (!m) return;
  st_layer_options lo;
  CHECK_OK(st_layer_get_options(st_model_layer(m, 0), &lo));
  CHECK(st_shape_equal(lo.target_shape, st_shape3(28, 28, 1)));
  CHECK_OK(st_layer_get_options(st_model_layer(m, 1), &lo));
  CHECK(lo.conv2d.filters == 16 && lo.conv2d.kh == 5 && lo.conv2d.kw == 5 && lo.conv2d.sh == 2 &&
        lo.conv2d.padding == ST_PAD_SAME && lo.conv2d.name == NULL && lo.dense.units == 0);
  CHECK_OK(st_layer_get_options(st_model_layer(m, 2), &lo));
  CHECK(lo.batchnorm.center && lo.batchnorm.scale && lo.batchnorm.epsilon > 0);
  CHECK_OK(st_layer_get_options(st_model_layer(m, 3), &lo));
  CHECK(lo.activation == ST_ACT_RELU);
  CHECK_OK(st_layer_get_options(st_model_layer(m, 4), &lo));
  CHECK(lo.pool2d.ph == 2 && lo.pool2d.pw == 2);
  CHECK_OK(st_layer_get_options(st_model_layer(m, 7), &lo));
  CHECK(lo.dropout_rate > 0 && lo.dropout_rate < 1);
  CHECK_OK(st_layer_get_options(st_model_layer(m, 10), &lo));
  CHECK(lo.dense.units == 10 && lo.dense.use_bias && lo.conv2d.filters == 0);
  CHECK(st_layer_get_options(NULL, &lo) == ST_ERR_INVALID);
  CHECK(st_layer_get_options(st_model_layer(m, 0), NULL) == ST_ERR_INVALID);
  st_model_destroy(m);
}

/* ---- Conv1D, DepthwiseConv2D, Embedding, LayerNormalization (issue 28) ---- */

static st_model *from_text(const char *text, st_status want, const char *needle) {
  st_model_options o = st_model_default_options(st_shape1(1));
  st_model *m = NULL;
  st_status s = st_model_from_keras_json_text(text, strlen(text), "t", &o, &m);
  CHECK_MSG(s == want, "got %s: %s", st_status_string(s), st_last_error());
  if (needle) CHECK_MSG(strstr(st_last_error(), needle), "%s lacks '%s'", st_last_error(), needle);
  return m;
}

#define SEQ_HEAD "{\"class_name\": \"Sequential\", \"config\": {\"layers\": ["
#define TEXT_INPUT "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8], " \
                   "\"dtype\": {\"class_name\": \"DTypePolicy\", \"config\": {\"name\": \"int32\"}}}}, "
#define EMB(extra) "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"emb\", \"input_dim\": " \
                   "50, \"output_dim\": 6" extra "}}, "

static void test_issue28_b_import(void) {
  const char *text = SEQ_HEAD TEXT_INPUT EMB(", \"embeddings_initializer\": {\"class_name\": "
      "\"RandomUniform\", \"config\": {\"minval\": -0.05, \"maxval\": 0.05, \"seed\": null}}, "
      "\"mask_zero\": false, \"input_length\": 8")
      "{\"class_name\": \"Conv1D\", \"config\": {\"filters\": 4, \"kernel_size\": [3], "
      "\"strides\": [1], \"padding\": \"causal\", \"dilation_rate\": [1], \"activation\": \"relu\"}}, "
      "{\"class_name\": \"LayerNormalization\", \"config\": {\"axis\": [2], \"epsilon\": 0.01, "
      "\"center\": true, \"scale\": false, \"rms_scaling\": false}}, "
      "{\"class_name\": \"Flatten\", \"config\": {}}, "
      "{\"class_name\": \"Dense\", \"config\": {\"units\": 2}}]}}";
  st_model *m = from_text(text, ST_OK, NULL);
  if (m) {
    CHECK(st_model_layer_count(m) == 5);
    const st_layer *e = st_model_layer(m, 0), *c = st_model_layer(m, 1), *n = st_model_layer(m, 2);
    CHECK(!strcmp(st_layer_class(e), "Embedding") && !strcmp(st_layer_name(e), "emb"));
    CHECK(st_shape_equal(st_layer_output_shape(e), (st_shape){2, {8, 6}}));
    CHECK(st_layer_param_count(e) == 300 && st_layer_param_count(c) == 3 * 6 * 4 + 4);
    CHECK(st_shape_equal(st_layer_output_shape(c), (st_shape){2, {8, 4}}));
    CHECK(st_layer_param_count(n) == 4); /* beta only (scale false) */
    st_layer_options lo;
    CHECK_OK(st_layer_get_options(e, &lo));
    CHECK(lo.embedding.input_dim == 50 && lo.embedding.embeddings_init == ST_INIT_RANDOM_UNIFORM);
    CHECK_OK(st_layer_get_options(c, &lo));
    CHECK(lo.conv1d.padding == ST_PAD_CAUSAL && lo.conv1d.kernel_size == 3 &&
          lo.conv1d.activation == ST_ACT_RELU && lo.conv2d.filters == 0);
    CHECK_OK(st_layer_get_options(n, &lo));
    CHECK(lo.layernorm.center && !lo.layernorm.scale && fabs(lo.layernorm.epsilon - 0.01) < 1e-7);
    check_compiles(m);
    st_model_destroy(m);
  }
  const char *img = SEQ_HEAD
      "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 3, \"kernel_size\": [3, 3], "
      "\"strides\": [2, 2], \"padding\": \"same\", \"use_bias\": false, "
      "\"batch_input_shape\": [null, 9, 9, 2], \"dtype\": \"float32\"}}, "
      "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"kernel_size\": [3, 3], \"strides\": "
      "[1, 1], \"padding\": \"same\", \"depth_multiplier\": 2, \"groups\": 1, \"use_bias\": false, "
      "\"depthwise_initializer\": \"he_normal\", \"activation\": \"relu\"}}]}}";
  if ((m = from_text(img, ST_OK, NULL))) {
    CHECK(st_layer_param_count(st_model_layer(m, 0)) == 3 * 3 * 2 * 3);
    CHECK(st_shape_equal(st_layer_output_shape(st_model_layer(m, 1)), st_shape3(5, 5, 6)));
    CHECK(st_layer_param_count(st_model_layer(m, 1)) == 3 * 3 * 3 * 2);
    st_model_destroy(m);
  }
  static const char *const bad[][2] = {
      {SEQ_HEAD TEXT_INPUT EMB(", \"mask_zero\": true") "{\"class_name\": \"Flatten\", \"config\": {}}]}}",
       "mask_zero"},
      {SEQ_HEAD TEXT_INPUT EMB(", \"embeddings_initializer\": {\"class_name\": \"RandomUniform\", "
       "\"config\": {\"minval\": -1, \"maxval\": 1}}") "{\"class_name\": \"Flatten\", \"config\": {}}]}}",
       "embeddings_initializer"},
      {SEQ_HEAD TEXT_INPUT EMB("") "{\"class_name\": \"Conv1D\", \"config\": {\"filters\": 2, "
       "\"kernel_size\": 3, \"padding\": \"full\"}}]}}", "padding \"full\""},
      {SEQ_HEAD TEXT_INPUT EMB("") "{\"class_name\": \"Conv1D\", \"config\": {\"filters\": 2, "
       "\"kernel_size\": [3, 3]}}]}}", "kernel_size [3, 3]"},
      {SEQ_HEAD TEXT_INPUT EMB("") "{\"class_name\": \"LayerNormalization\", \"config\": "
       "{\"axis\": 1}}]}}", "axis 1"},
      {SEQ_HEAD TEXT_INPUT EMB("") "{\"class_name\": \"LayerNormalization\", \"config\": "
       "{\"rms_scaling\": true}}]}}", "rms_scaling"},
      {SEQ_HEAD TEXT_INPUT "{\"class_name\": \"Embedding\", \"config\": {\"input_dim\": 0, "
       "\"output_dim\": 3}}]}}", "input_dim"},
      {SEQ_HEAD "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"kernel_size\": 3, "
       "\"padding\": \"causal\", \"batch_input_shape\": [null, 4, 4, 1]}}]}}", "padding"},
      {SEQ_HEAD "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"kernel_size\": 5, "
       "\"batch_input_shape\": [null, 4, 4, 1]}}]}}", "does not fit"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    m = from_text(bad[i][0], ST_ERR_FORMAT, bad[i][1]);
    CHECK_MSG(m == NULL, "bad case %zu built a model", i);
    st_model_destroy(m);
  }
}
/* ---- end of the issue 28 (helper B) block ---- */

/* keras_hub's PositionEmbedding imports; ReversibleEmbedding is refused
 * naming the C constructor (issue 31). */
static void test_gpt_layers_import(void) {
  const char *text = SEQ_HEAD TEXT_INPUT EMB("")
      "{\"class_name\": \"PositionEmbedding\", \"module\": \"keras_hub.layers\", \"config\": "
      "{\"name\": \"pos\", \"sequence_length\": 12, \"initializer\": \"zeros\"}}]}}";
  st_model *m = from_text(text, ST_OK, NULL);
  if (m) {
    const st_layer *p = st_model_layer(m, 1);
    CHECK(!strcmp(st_layer_class(p), "PositionEmbedding") && st_layer_param_count(p) == 12 * 6);
    st_layer_options lo;
    CHECK_OK(st_layer_get_options(p, &lo));
    CHECK(lo.position_embedding.sequence_length == 12 &&
          lo.position_embedding.initializer == ST_INIT_ZEROS);
    st_model_destroy(m);
  }
  m = from_text(SEQ_HEAD TEXT_INPUT EMB("") "{\"class_name\": \"PositionEmbedding\", \"config\": "
                "{\"sequence_length\": 4}}]}}", ST_ERR_FORMAT, "T <= sequence_length 4");
  st_model_destroy(m);
  m = from_text(SEQ_HEAD TEXT_INPUT "{\"class_name\": \"ReversibleEmbedding\", \"config\": "
                "{\"input_dim\": 50, \"output_dim\": 6}}]}}", ST_ERR_FORMAT,
                "st_reversible_embedding");
  st_model_destroy(m);
}

static void cleanup_tmp(void) {
  const char *names[] = {"ok.json", "dup_name.json", "overflow.json", "neg_dim.json",
                         "real_units.json", "kernel.json", "nofit.json", "flat_dense.json",
                         "reshape.json", "bn_axis.json", "bn_init.json", "dtype.json",
                         "frozen.json", "unknown_opt.json", "custom.json", "relu6.json",
                         "badname.json", "late_input.json", "functional.json", "many.json",
                         "deep.json", "nested.json", "big.json", "a2d.json", "a1d.json",
                         "keepdims.json", "gap_rank.json", "zp_bad.json", "zp_neg.json",
                         "leaky_both.json", "relu_thr.json"};
  char path[1024];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", g_tmp, names[i]);
    unlink(path);
  }
  rmdir(g_tmp);
}

static const check_case cases[] = {
    CHECK_CASE(test_cnn),       CHECK_CASE(test_mlp),               CHECK_CASE(test_mixed),
    CHECK_CASE(test_bad_fixtures), CHECK_CASE(test_generated), CHECK_CASE(test_generated_options),
    CHECK_CASE(test_limits),    CHECK_CASE(test_text),              CHECK_CASE(test_layer_options),
    CHECK_CASE(test_layers_a),
    /* issue 28, helper B */
    CHECK_CASE(test_gpt_layers_import), CHECK_CASE(test_issue28_b_import)};

int main(int argc, char **argv) {
  const char *src = getenv("STRATA_SOURCE_DIR");
  snprintf(g_dir, sizeof g_dir, "%s/tests/keras", src ? src : ".");
  if (access(g_dir, R_OK) != 0) check_skip("tests/keras not found (set STRATA_SOURCE_DIR)");
  const char *tmp = getenv("TMPDIR");
  snprintf(g_tmp, sizeof g_tmp, "%s/strata_keras_XXXXXX", tmp ? tmp : "/tmp");
  if (!mkdtemp(g_tmp)) check_skip("cannot create a temporary directory");
  int rc = CHECK_MAIN(argc, argv, cases);
  cleanup_tmp();
  return rc;
}
