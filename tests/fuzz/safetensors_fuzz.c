/* libFuzzer target: the safetensors reader (st__safetensors_read), which every
 * weights file and checkpoint goes through. A file that reads is walked
 * (names looked up, every float touched) and freed. */
#include "fuzz_common.h"
#include "io/safetensors.h"

static st_fuzz_file safetensors_fuzz_file_;

int st_fuzz_safetensors(const uint8_t *data, size_t size) {
  st_fuzz_init_once();
  st_fuzz_file_put(&safetensors_fuzz_file_, "safetensors", data, size);
  st_safetensors s;
  memset(&s, 0, sizeof s);
  if (st__safetensors_read(safetensors_fuzz_file_.path, &s) == ST_OK) {
    volatile float sink = 0;
    for (int i = 0; i < s.n; i++) {
      const st_named_tensor *t = &s.tensors[i];
      if (st__safetensors_find(&s, t->name) == NULL) abort(); /* must find its own names */
      size_t count = 1;
      for (int d = 0; d < t->rank; d++) count *= (size_t)t->dims[d];
      for (size_t j = 0; j < count; j++) sink += t->data[j];
    }
    (void)sink;
  }
  st__safetensors_free(&s);
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return st_fuzz_safetensors(data, size);
}
#endif
