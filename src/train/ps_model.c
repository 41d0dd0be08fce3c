/* The model of a parameter-server job (train/ps_model.h): every task (the
 * chief, each worker and ps) builds it alike from the job, here because a
 * Keras JSON file is read by src/io. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "train/ps_model.h"

static st_status build(const st__ps_job *j, st_strategy **strategy, st_model **model) {
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  so.threads = 1;
  st_status s = st_strategy_create(&so, strategy);
  if (s != ST_OK) return s;
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  mo.seed = (uint64_t)j->seed;
  mo.strategy = *strategy;
  size_t mlen = strlen(j->model);
  if (mlen > 5 && !strcmp(j->model + mlen - 5, ".json")) { /* a Keras model file */
    mo.name = NULL;
    s = st_model_from_keras_json(j->model, &mo, model);
  } else {
    s = st_builtin_model_create(j->model, &mo, model);
  }
  if (s != ST_OK) return s;
  if ((*model)->net.n_outputs > 1)
    return st_error(ST_ERR_INVALID, "parameter_server: model %s has %d outputs: a model of "
                    "several outputs does not run under the parameter_server strategy "
                    "(one_device, mirrored and central_storage run it)", j->model,
                    (*model)->net.n_outputs);
  st_compile_options co = st_compile_default_options();
  int nl = st_model_layer_count(*model);
  bool softmax = nl && st_layer_output_activation(st_model_layer(*model, nl - 1)) == ST_ACT_SOFTMAX;
  co.loss = softmax ? ST_LOSS_SPARSE_CE : ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = j->opt;
  return st_model_compile(*model, &co); /* non-trainable state (BatchNormalization): on ps 0 */
}

static void destroy_built(void *owner) {
  st__ps_built *bt = owner;
  if (!bt) return;
  st_model_destroy(bt->model);
  st_strategy_destroy(bt->strategy);
  free(bt);
}

st_status st__ps_build_model(const st__ps_job *j, st__ps_model *out) {
  memset(out, 0, sizeof *out);
  st__ps_built *bt = calloc(1, sizeof *bt);
  if (!bt) return st_error(ST_ERR_NOMEM, "out of memory");
  out->owner = bt, out->destroy = destroy_built;
  st_status s = build(j, &bt->strategy, &bt->model);
  if (s == ST_OK) out->net = &bt->model->net;
  return s;
}
