/* Per-example shapes (no batch dimension): constructors, size, equality and the
 * Keras-style text form "(None, 13, 13, 32)". Pure functions, any thread. */
#include <stdio.h>

#include "strata/base.h"

st_shape st_shape1(int d0) {
  st_shape s = {.rank = 1, .dims = {d0}};
  return s;
}

st_shape st_shape3(int h, int w, int c) {
  st_shape s = {.rank = 3, .dims = {h, w, c}};
  return s;
}

/* Product of the dims (1 for rank 0); a negative dim counts as 0. */
size_t st_shape_size(st_shape s) {
  size_t n = 1;
  for (int i = 0; i < s.rank && i < ST_MAX_RANK; i++)
    n *= s.dims[i] > 0 ? (size_t)s.dims[i] : 0;
  return n;
}

bool st_shape_equal(st_shape a, st_shape b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank && i < ST_MAX_RANK; i++)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}

/* Writes "(None, d0, d1, ...)" into buf[n] (truncated to fit); returns buf. */
const char *st_shape_format(st_shape s, char *buf, size_t n) {
  if (!buf) return "";
  if (n == 0) return buf;
  size_t used = (size_t)snprintf(buf, n, "(None");
  for (int i = 0; i < s.rank && i < ST_MAX_RANK && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, ", %d", s.dims[i]);
  if (used < n) snprintf(buf + used, n - used, ")");
  return buf;
}
