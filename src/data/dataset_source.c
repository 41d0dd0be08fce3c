/* The tensor-slices source: examples are rows of x (u8, i32 or f32) and y
 * (u8, i32 or f32), kept in their stored type (borrowed, or copied when asked)
 * and converted to float, with x scaled by x_scale, only when an example is
 * produced. Besides the usual iterator it exposes st__slices_row so a shuffle
 * directly above it can gather rows in permuted order without buffering
 * converted elements. */
#include "base/args.h"
#include "data/dataset_impl.h"
#include "data/labels.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct slices_node {
  st_dataset base;
  st_tensor x, y;      /* data borrowed or owned (copy) */
  bool owned;
  float x_scale;
  int64_t n;           /* examples */
  size_t x_row_bytes;  /* bytes of one example in x's dtype */
  size_t y_row_bytes;
} slices_node;

typedef struct slices_iter {
  st_iterator base;
  const slices_node *src;
  int64_t i;
  float *x, *y; /* [x_size], [y_size]: the element handed out by next */
} slices_iter;

/* u8 -> float times scale, the hot loop of an image pipeline. Plain -O2 does
 * not vectorize it (and GCC's generic vector lowering is slow on SSE2), so x86
 * gets an SSE2 version (4x faster); other targets use the plain loop. */
#if defined(__SSE2__)
#include <emmintrin.h>
static void convert_u8(const uint8_t *s, size_t n, float scale, float *dst) {
  const __m128i z = _mm_setzero_si128();
  const __m128 m = _mm_set1_ps(scale);
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(s + k));
    __m128i lo = _mm_unpacklo_epi8(v, z), hi = _mm_unpackhi_epi8(v, z);
    _mm_storeu_ps(dst + k, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)), m));
    _mm_storeu_ps(dst + k + 4, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)), m));
    _mm_storeu_ps(dst + k + 8, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)), m));
    _mm_storeu_ps(dst + k + 12, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)), m));
  }
  for (; k < n; k++) dst[k] = (float)s[k] * scale;
}
#else
static void convert_u8(const uint8_t *s, size_t n, float scale, float *dst) {
  for (size_t k = 0; k < n; k++) dst[k] = (float)s[k] * scale;
}
#endif

/* n values of type t at src to float, times scale. */
static void convert(st_dtype t, const void *src, size_t n, float scale, float *dst) {
  if (t == ST_U8) {
    convert_u8(src, n, scale, dst);
  } else if (t == ST_I32) {
    const int32_t *s = src;
    for (size_t k = 0; k < n; k++) dst[k] = (float)s[k] * scale;
  } else {
    const float *s = src;
    if (scale == 1.0f) memcpy(dst, s, n * sizeof(float));
    else
      for (size_t k = 0; k < n; k++) dst[k] = s[k] * scale;
  }
}

static const slices_node *as_slices(const st_dataset *ds) { return (const slices_node *)ds; }

void st__slices_row(const st_dataset *ds, int64_t i, float *x, float *y) {
  const slices_node *s = as_slices(ds);
  const char *xs = (const char *)s->x.data + (size_t)i * s->x_row_bytes;
  const char *ys = s->y.data ? (const char *)s->y.data + (size_t)i * s->y_row_bytes : NULL;
  convert(s->x.dtype, xs, s->base.x_size, s->x_scale, x);
  if (s->base.y_size) convert(s->y.dtype, ys, s->base.y_size, 1.0f, y);
}

int64_t st__slices_count(const st_dataset *ds) { return as_slices(ds)->n; }

void st__slices_prefetch(const st_dataset *ds, int64_t i) {
  const slices_node *s = as_slices(ds);
  const char *xs = (const char *)s->x.data + (size_t)i * s->x_row_bytes;
  size_t n = s->x_row_bytes < 4096 ? s->x_row_bytes : 4096;
  for (size_t o = 0; o < n; o += 64) __builtin_prefetch(xs + o);
  if (s->y.data) __builtin_prefetch((const char *)s->y.data + (size_t)i * s->y_row_bytes);
}

static st_status slices_next_into(st_iterator *base, float *x, float *y, bool *end) {
  slices_iter *it = (slices_iter *)base;
  if (it->i >= it->src->n) return *end = true, ST_OK;
  st__slices_row(&it->src->base, it->i++, x, y);
  return ST_OK;
}

static st_status slices_next(st_iterator *base, st_batch *out, bool *end) {
  slices_iter *it = (slices_iter *)base;
  st_status s = slices_next_into(base, it->x, it->y, end);
  if (s == ST_OK && !*end) *out = (st_batch){1, it->x, it->y};
  return s;
}

static st_status slices_skip(st_iterator *base, int64_t n, int64_t *done) {
  slices_iter *it = (slices_iter *)base;
  int64_t left = it->src->n - it->i;
  *done = n < left ? n : left;
  it->i += *done;
  return ST_OK;
}

static void slices_iter_destroy(st_iterator *base) {
  slices_iter *it = (slices_iter *)base;
  free(it->x);
  free(it);
}

static const st__iter_ops slices_iter_ops = {slices_next, slices_next_into, slices_skip,
                                             slices_iter_destroy};

static st_status slices_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  slices_iter *it = calloc(1, sizeof *it);
  float *buf = calloc(ds->x_size + ds->y_size, sizeof(float));
  if (!it || !buf) {
    free(it);
    free(buf);
    return st_error(ST_ERR_NOMEM, "tensor slices: out of memory for an iterator");
  }
  it->base.ops = &slices_iter_ops;
  it->src = as_slices(ds);
  it->x = buf;
  it->y = buf + ds->x_size;
  *out = &it->base;
  return ST_OK;
}

static void slices_destroy(st_dataset *ds) {
  slices_node *s = (slices_node *)ds;
  if (s->owned) {
    st_free(s->x.data);
    st_free(s->y.data);
  }
}

static const st__ds_ops slices_ops = {"tensor_slices", slices_iterate, slices_destroy, NULL, NULL, NULL};

bool st__ds_is_slices(const st_dataset *ds) { return ds && ds->ops == &slices_ops; }

/* Checks one input tensor; *row = values per example, *bytes = whole payload. */
static st_status check_tensor(const st_tensor *t, const char *what, size_t *row,
                              size_t *bytes) {
  if (t->dtype != ST_U8 && t->dtype != ST_F32 && t->dtype != ST_I32)
    return st_error(ST_ERR_INVALID, "from_tensor_slices: %s has unsupported dtype %d", what,
                    (int)t->dtype);
  if (t->rank < 1 || t->rank > ST_MAX_RANK + 1)
    return st_error(ST_ERR_INVALID, "from_tensor_slices: %s has rank %d (expected 1..%d)",
                    what, t->rank, ST_MAX_RANK + 1);
  if (t->dims[0] < 0)
    return st_error(ST_ERR_INVALID, "from_tensor_slices: %s has %lld examples", what,
                    (long long)t->dims[0]);
  size_t n = 1;
  for (int i = 1; i < t->rank; i++) {
    if (t->dims[i] < 1 || t->dims[i] > INT_MAX)
      return st_error(ST_ERR_INVALID, "from_tensor_slices: %s dimension %d = %lld out of "
                      "range 1..%d", what, i, (long long)t->dims[i], INT_MAX);
    if (!st_mul_size(n, (size_t)t->dims[i], &n))
      return st_error(ST_ERR_INVALID, "from_tensor_slices: %s example size overflows", what);
  }
  if (!st_mul_size(n, (size_t)t->dims[0], bytes) ||
      !st_mul_size(*bytes, st_dtype_size(t->dtype), bytes))
    return st_error(ST_ERR_INVALID, "from_tensor_slices: %s size overflows", what);
  if (*bytes > 0 && !t->data)
    return st_error(ST_ERR_INVALID, "from_tensor_slices: %s has no data", what);
  *row = n;
  return ST_OK;
}

/* dst = t, with the data copied when asked. */
static st_status keep_tensor(const st_tensor *t, size_t bytes, bool copy, st_tensor *dst) {
  *dst = *t;
  if (!copy) return ST_OK;
  dst->data = NULL;
  if (bytes == 0) return ST_OK;
  if (!(dst->data = st_alloc(bytes))) return ST_ERR_NOMEM;
  memcpy(dst->data, t->data, bytes);
  return ST_OK;
}

static void set_shape(slices_node *s, const st_tensor *x, size_t xrow, size_t yrow) {
  st_dataset *ds = &s->base;
  ds->ops = &slices_ops;
  ds->x_shape.rank = x->rank > 1 ? x->rank - 1 : 1;
  ds->x_shape.dims[0] = 1;
  for (int i = 1; i < x->rank; i++) ds->x_shape.dims[i - 1] = (int)x->dims[i];
  ds->x_size = xrow;
  ds->y_size = yrow;
  ds->cardinality = s->n;
}

st_status st_dataset_from_tensor_slices(const st_tensor *x, const st_tensor *y,
                                        float x_scale, bool copy, st_dataset **out) {
  ST_REQUIRE(x);
  ST_REQUIRE(out);
  *out = NULL;
  size_t xrow, yrow = 0, xbytes, ybytes = 0;
  st_status s = check_tensor(x, "x", &xrow, &xbytes);
  if (s == ST_OK && y) s = check_tensor(y, "y", &yrow, &ybytes);
  if (s != ST_OK) return s;
  if (y && x->dims[0] != y->dims[0])
    return st_error(ST_ERR_INVALID, "from_tensor_slices: x has %lld examples but y has %lld",
                    (long long)x->dims[0], (long long)y->dims[0]);
  if (!isfinite(x_scale))
    return st_error(ST_ERR_INVALID, "from_tensor_slices: x_scale %g is not finite",
                    (double)x_scale);
  slices_node *n = calloc(1, sizeof *n);
  if (!n) return st_error(ST_ERR_NOMEM, "from_tensor_slices: out of memory");
  n->owned = copy;
  n->x_scale = x_scale;
  n->n = x->dims[0];
  n->x_row_bytes = xrow * st_dtype_size(x->dtype);
  n->y_row_bytes = y ? yrow * st_dtype_size(y->dtype) : 0;
  set_shape(n, x, xrow, yrow);
  s = keep_tensor(x, xbytes, copy, &n->x);
  if (s == ST_OK && y) s = keep_tensor(y, ybytes, copy, &n->y);
  if (s != ST_OK) {
    st_dataset_destroy(&n->base);
    return s;
  }
  *out = &n->base;
  return ST_OK;
}

st_status st__slices_borrow(const st_dataset *src, st_dataset **out) {
  const slices_node *s = as_slices(src);
  slices_node *n = calloc(1, sizeof *n);
  if (!n) return st_error(ST_ERR_NOMEM, "from_tensor_slices: out of memory");
  *n = *s;
  n->owned = false;
  n->base.input = NULL;
  n->base.next_epoch = 0;
  *out = &n->base;
  return ST_OK;
}

/* Transforms that keep every row of their input with its labels unchanged. */
static bool keeps_labels(const st_dataset *ds) {
  static const char *const names[] = {"shuffle", "batch", "prefetch", "repeat"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (ds->input && strcmp(ds->ops->name, names[i]) == 0) return true;
  return false;
}

st_status st__ds_scan_labels(const st_dataset *ds, st__label_fn fn, void *user, bool *scanned) {
  *scanned = false;
  while (ds && keeps_labels(ds)) ds = ds->input;
  st__index_view v;
  if (!ds || !st__ds_index_view(ds, &v)) return ST_OK;
  const slices_node *s = as_slices(v.src);
  float *y = malloc((s->base.y_size ? s->base.y_size : 1) * sizeof *y);
  if (!y) return st_error(ST_ERR_NOMEM, "fit: out of memory for a label row");
  *scanned = true;
  st_status st = ST_OK;
  for (int64_t k = 0; k < v.count && st == ST_OK; k++) {
    int64_t row = v.start + k * v.step;
    convert(s->y.dtype, (const char *)s->y.data + (size_t)row * s->y_row_bytes,
            s->base.y_size, 1.0f, y);
    st = fn(y, row, user);
  }
  free(y);
  return st;
}
