/* The built-in named models. mlp and cnn match the PyTorch peer's models in
 * ../shared/peers/fmnist.py layer for layer, so results compare directly;
 * resnet20 and mobilenet-tiny are graphs (builtin_graphs.c), gpt GPT-2's
 * small default (builtin_gpt.c). */
#include <string.h>

#include "strata/train.h"
#include "train/builtin.h"

static const char *const names[] = {"mlp", "cnn", "resnet20", "mobilenet-tiny", "gpt", NULL};

const char *const *st_builtin_model_names(void) { return names; }

/* Add the layer a constructor made (made: its status; *l: the layer). */
static st_status add(st_model *m, st_status made, st_layer **l) {
  if (made != ST_OK) return made;
  return st_model_add(m, *l); /* takes ownership even on failure */
}

st_status st_builtin_model_create(const char *name, const st_model_options *o,
                                  st_model **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_builtin_model_create: out is NULL");
  *out = NULL;
  if (!name || !o)
    return st_error(ST_ERR_INVALID, "st_builtin_model_create: %s is NULL", name ? "o" : "name");
  if (!strcmp(name, "resnet20") || !strcmp(name, "mobilenet-tiny"))
    return st__builtin_graph_create(name, o, out);
  if (!strcmp(name, "gpt")) { /* the small default (builtin_gpt.c; st_gpt_create for others) */
    st_gpt_config c = st_gpt_default_config();
    return st_gpt_create(&c, o, out);
  }
  st_model_options mo = *o;
  mo.input_shape = st_shape3(28, 28, 1);
  bool mlp = strcmp(name, "mlp") == 0, cnn = strcmp(name, "cnn") == 0;
  if (!mlp && !cnn)
    return st_error(ST_ERR_INVALID, "unknown model '%s' (built-in models: mlp, cnn, resnet20, "
                    "mobilenet-tiny, gpt)", name);
  st_model *m = NULL;
  st_status s = st_sequential_create(&mo, &m);
  if (s != ST_OK) return s;
  st_layer *l = NULL;
  if (mlp) {
    s = add(m, st_flatten(&l), &l);
    if (s == ST_OK) s = add(m, st_dense(256, ST_ACT_RELU, &l), &l);
    if (s == ST_OK) s = add(m, st_dense(128, ST_ACT_RELU, &l), &l);
    if (s == ST_OK) s = add(m, st_dense(10, ST_ACT_LINEAR, &l), &l);
  } else {
    s = add(m, st_conv2d(32, 3, ST_ACT_RELU, &l), &l);
    if (s == ST_OK) s = add(m, st_maxpool2d(2, &l), &l);
    if (s == ST_OK) s = add(m, st_conv2d(64, 3, ST_ACT_RELU, &l), &l);
    if (s == ST_OK) s = add(m, st_maxpool2d(2, &l), &l);
    if (s == ST_OK) s = add(m, st_flatten(&l), &l);
    if (s == ST_OK) s = add(m, st_dense(128, ST_ACT_RELU, &l), &l);
    if (s == ST_OK) s = add(m, st_dense(10, ST_ACT_LINEAR, &l), &l);
  }
  if (s != ST_OK) {
    st_model_destroy(m);
    return s;
  }
  *out = m;
  return ST_OK;
}
