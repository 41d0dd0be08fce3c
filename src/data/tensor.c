/* Host tensors of the data layer: element sizes and names of the dtypes, the
 * element count of a tensor and its release. A tensor's data buffer is always
 * allocated with st_alloc (64-byte aligned) by the readers that fill it, so
 * st_tensor_destroy releases it with st_free. */
#include "strata/data.h"

#include <string.h>

size_t st_dtype_size(st_dtype t) {
  switch (t) {
  case ST_F32: return 4;
  case ST_U8: return 1;
  case ST_I32: return 4;
  default: return 0;
  }
}

const char *st_dtype_name(st_dtype t) {
  switch (t) {
  case ST_F32: return "float32";
  case ST_U8: return "uint8";
  case ST_I32: return "int32";
  default: return "unknown";
  }
}

/* Product of dims[0..rank); 0 for a NULL tensor, a bad rank or a negative
 * dimension; SIZE_MAX if the product overflows size_t. */
size_t st_tensor_count(const st_tensor *t) {
  if (!t || t->rank < 0 || t->rank > ST_MAX_RANK + 1) return 0;
  size_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return 0;
    if (!st_mul_size(n, (size_t)t->dims[i], &n)) return SIZE_MAX;
  }
  return n;
}

void st_tensor_destroy(st_tensor *t) {
  if (!t) return;
  st_free(t->data);
  memset(t, 0, sizeof *t);
}
