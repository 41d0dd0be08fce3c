/* libFuzzer target: Keras model.to_json() import (st_model_from_keras_json).
 * The input is the JSON file; an imported model is summarised (walks every
 * layer and shape) and destroyed. */
#include "fuzz_common.h"
#include "strata/train.h"

static st_fuzz_file keras_fuzz_file_;

int st_fuzz_keras_json(const uint8_t *data, size_t size) {
  st_fuzz_init_once();
  st_fuzz_file_put(&keras_fuzz_file_, "keras", data, size);
  st_model_options o = st_model_default_options(st_shape1(1));
  st_model *m = NULL;
  if (st_model_from_keras_json(keras_fuzz_file_.path, &o, &m) == ST_OK) {
    char *summary = NULL;
    (void)st_model_summary(m, &summary);
    free(summary);
  }
  st_model_destroy(m);
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return st_fuzz_keras_json(data, size);
}
#endif
