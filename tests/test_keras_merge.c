/* Keras JSON layer configs of the merge layers and MultiHeadAttention (issue
 * 28): the per-layer parse (src/io/keras_layers.c) of configs as Keras 2 and
 * Keras 3 write them, the options they give, the configs refused (naming the
 * option), and a Sequential holding one (an error naming the layer: these
 * layers need a functional graph). */
#include <string.h>

#include "check.h"
#include "io/keras.h"
#include "strata/strata.h"

/* Parses one layer entry from JSON text; ST_OK or the parse's status. */
static st_status parse(const char *text, st__keras_layer *k) {
  json_error_t err;
  json_t *j = json_loads(text, 0, &err);
  CHECK_MSG(j != NULL, "bad test JSON: %s", err.text);
  if (!j) return ST_ERR_INVALID;
  st__keras_ctx c = {.file = "test.json", .index = 1};
  st_status s = st__keras_parse_layer(&c, j, k);
  json_decref(j);
  return s;
}

static void refused(const char *text, const char *want) {
  st__keras_layer k;
  CHECK_EQ(parse(text, &k), ST_ERR_FORMAT);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "'%s' lacks '%s'", st_last_error(), want);
}

static void test_merge_configs(void) {
  st__keras_layer k;
  const char *cls[] = {"Add", "Subtract", "Multiply"};
  st__keras_kind kinds[] = {ST__K_ADD, ST__K_SUBTRACT, ST__K_MULTIPLY};
  char text[256];
  for (int i = 0; i < 3; i++) {
    snprintf(text, sizeof text, "{\"class_name\": \"%s\", \"config\": {\"name\": \"m%d\", "
             "\"trainable\": true, \"dtype\": \"float32\"}}", cls[i], i);
    CHECK_OK(parse(text, &k));
    CHECK_EQ(k.kind, kinds[i]);
    CHECK_STREQ(k.name, i == 0 ? "m0" : i == 1 ? "m1" : "m2");
  }
  CHECK_OK(parse("{\"class_name\": \"Concatenate\", \"config\": {\"name\": \"cat\", \"axis\": 2}}",
                 &k));
  CHECK_EQ(k.kind, ST__K_CONCATENATE);
  CHECK_EQ(k.u.concat_axis, 2);
  CHECK_OK(parse("{\"class_name\": \"Concatenate\", \"config\": {}}", &k));
  CHECK_EQ(k.u.concat_axis, -1);
  refused("{\"class_name\": \"Concatenate\", \"config\": {\"axis\": 0}}", "batch axis");
  refused("{\"class_name\": \"Concatenate\", \"config\": {\"axis\": \"x\"}}", "axis");
  refused("{\"class_name\": \"Add\", \"config\": {\"axis\": 1}}", "option 'axis'");
}

/* As Keras 3's MultiHeadAttention.get_config() writes it. */
static const char *k3_mha =
    "{\"module\": \"keras.layers\", \"class_name\": \"MultiHeadAttention\", \"config\": "
    "{\"name\": \"mha\", \"trainable\": true, \"dtype\": \"float32\", \"num_heads\": 4, "
    "\"key_dim\": 16, \"value_dim\": 8, \"dropout\": 0.1, \"use_bias\": false, "
    "\"output_shape\": 32, \"attention_axes\": null, \"kernel_initializer\": {\"module\": "
    "\"keras.initializers\", \"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}, "
    "\"registered_name\": null}, \"bias_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, \"activity_regularizer\": null, "
    "\"kernel_constraint\": null, \"bias_constraint\": null, \"seed\": null}, "
    "\"registered_name\": null}";

/* As tf.keras 2's get_config() writes it (query/key/value shapes, no seed). */
static const char *k2_mha =
    "{\"class_name\": \"MultiHeadAttention\", \"config\": {\"name\": \"att\", \"trainable\": "
    "true, \"dtype\": \"float32\", \"num_heads\": 2, \"key_dim\": 8, \"value_dim\": null, "
    "\"dropout\": 0.0, \"use_bias\": true, \"output_shape\": null, \"attention_axes\": [1], "
    "\"kernel_initializer\": {\"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}}, "
    "\"bias_initializer\": {\"class_name\": \"Zeros\", \"config\": {}}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, \"activity_regularizer\": null, "
    "\"kernel_constraint\": null, \"bias_constraint\": null, \"query_shape\": [null, 10, 16], "
    "\"key_shape\": [null, 10, 16], \"value_shape\": [null, 10, 16]}}";

static void test_mha_configs(void) {
  st__keras_layer k;
  CHECK_OK(parse(k3_mha, &k));
  CHECK_EQ(k.kind, ST__K_MHA);
  CHECK_EQ(k.u.mha.num_heads, 4);
  CHECK_EQ(k.u.mha.key_dim, 16);
  CHECK_EQ(k.u.mha.value_dim, 8);
  CHECK_NEAR(k.u.mha.dropout, 0.1, 1e-7);
  CHECK(!k.u.mha.use_bias);
  CHECK_EQ(k.u.mha.output_dim, 32);
  CHECK(!k.u.mha.use_causal_mask);
  CHECK_OK(parse(k2_mha, &k));
  CHECK_EQ(k.u.mha.num_heads, 2);
  CHECK_EQ(k.u.mha.value_dim, 0);
  CHECK_EQ(k.u.mha.output_dim, 0);
  CHECK(k.u.mha.use_bias);
  CHECK(!k.u.mha.use_causal_mask);
  CHECK_OK(parse("{\"class_name\": \"MultiHeadAttention\", \"config\": {\"num_heads\": 2, "
                 "\"key_dim\": 4, \"use_causal_mask\": true}}", &k));
  CHECK(k.u.mha.use_causal_mask);
  refused("{\"class_name\": \"MultiHeadAttention\", \"config\": {\"key_dim\": 4}}",
          "missing option 'num_heads'");
  refused("{\"class_name\": \"MultiHeadAttention\", \"config\": {\"num_heads\": 2, "
          "\"key_dim\": 0}}", "key_dim 0");
  refused("{\"class_name\": \"MultiHeadAttention\", \"config\": {\"num_heads\": 2, "
          "\"key_dim\": 4, \"attention_axes\": [1, 2]}}", "attention_axes");
  refused("{\"class_name\": \"MultiHeadAttention\", \"config\": {\"num_heads\": 2, "
          "\"key_dim\": 4, \"output_shape\": [4, 5]}}", "output_shape");
  refused("{\"class_name\": \"MultiHeadAttention\", \"config\": {\"num_heads\": 2, "
          "\"key_dim\": 4, \"kernel_regularizer\": \"l2\"}}", "kernel_regularizer");
  refused("{\"class_name\": \"MultiHeadAttention\", \"config\": {\"num_heads\": 2, "
          "\"key_dim\": 4, \"activation\": \"relu\"}}", "option 'activation'");
  refused("{\"class_name\": \"MultiHeadAttention\", \"config\": {\"num_heads\": 2, "
          "\"key_dim\": 4, \"dropout\": 1.5}}", "dropout");
}

/* A merge layer in a Sequential: refused, naming it, never a crash. */
static void test_in_sequential(void) {
  const char *text =
      "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
      "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4]}},"
      "{\"class_name\": \"Add\", \"config\": {\"name\": \"plus\"}}]}}";
  st_model *m = NULL;
  st_model_options o = st_model_default_options(st_shape1(4));
  st_status s = st_model_from_keras_json_text(text, strlen(text), NULL, &o, &m);
  CHECK_NE(s, ST_OK);
  CHECK(m == NULL);
  CHECK_MSG(strstr(st_last_error(), "Add") != NULL, "%s", st_last_error());
  st_model_destroy(m);
}

static const check_case cases[] = {CHECK_CASE(test_merge_configs), CHECK_CASE(test_mha_configs),
                                   CHECK_CASE(test_in_sequential)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
