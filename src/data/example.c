/* tf.train.Example: parsing with a FixedLenFeature spec and serializing, both
 * through protobuf-c and the schema in src/data/proto/ (compiled by protoc-c at
 * build time: example.pb-c.h is generated in the build folder), and the JSON
 * feature spec of `strata train --features`. Parsing allocates through a
 * ProtobufCAllocator with a budget (st__example_decode_budget): protobuf-c
 * allocates per map entry / repeated element, ~45x the input for a record of
 * empty feature-map entries, so an unbounded unpack is a memory bomb. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/args.h"
#include "base/fileio.h"
#include "data/tfrecord_ds.h"
#include "example.pb-c.h"
#include "strata/data.h"

#define DECODE_FACTOR 8            /* packed int64 varints: 1 input byte -> 8 */
#define DECODE_SLACK (64u << 10)
#define DECODE_DEFAULT_MAX (64u << 20) /* st_parse_example: as max_record_bytes' default */
#define ALLOC_OVERHEAD 16          /* malloc's chunk header, counted per allocation */
#define ALLOC_MAPPED (256u << 10)  /* from here on mmap'd: given back to the system on free */

static const char *const dtype_names[ST_FEATURE_DTYPE_COUNT] = {"float32", "int64", "uint8"};
static const char *const kind_names[] = {"no value", "bytes_list", "float_list", "int64_list"};

size_t st_feature_spec_size(const st_feature_spec *f) {
  if (!f) return 0;
  size_t n = 1;
  for (int i = 0; i < f->shape.rank; i++) n *= (size_t)f->shape.dims[i];
  return n;
}

static const Tensorflow__Feature *find(const Tensorflow__Example *ex, const char *name) {
  if (!ex->features) return NULL;
  for (size_t i = 0; i < ex->features->n_feature; i++) {
    const Tensorflow__Features__FeatureEntry *e = ex->features->feature[i];
    if (e && e->key && !strcmp(e->key, name)) return e->value;
  }
  return NULL;
}

/* The values of one feature of the spec into dst [st_feature_spec_size]. */
static st_status fill(const Tensorflow__Example *ex, const st_feature_spec *f, float *dst) {
  const Tensorflow__Feature *v = find(ex, f->name);
  if (!v) return st_error(ST_ERR_FORMAT, "feature '%s': missing from the example", f->name);
  size_t want = st_feature_spec_size(f), have = 0;
  static const int kinds[ST_FEATURE_DTYPE_COUNT] = {TENSORFLOW__FEATURE__KIND_FLOAT_LIST,
                                                    TENSORFLOW__FEATURE__KIND_INT64_LIST,
                                                    TENSORFLOW__FEATURE__KIND_BYTES_LIST};
  int kind = (int)v->kind_case;
  if (kind != kinds[f->dtype] || !v->float_list)
    return st_error(ST_ERR_FORMAT, "feature '%s': holds a %s, the spec says %s (%s)", f->name,
                    kind >= 0 && kind <= 3 ? kind_names[kind] : "?", dtype_names[f->dtype],
                    kind_names[kinds[f->dtype]]);
  if (f->dtype == ST_FEATURE_FLOAT32) {
    have = v->float_list->n_value;
    if (have == want) memcpy(dst, v->float_list->value, want * sizeof *dst);
  } else if (f->dtype == ST_FEATURE_INT64) {
    have = v->int64_list->n_value;
    for (size_t i = 0; have == want && i < want; i++) dst[i] = (float)v->int64_list->value[i];
  } else {
    if (v->bytes_list->n_value != 1)
      return st_error(ST_ERR_FORMAT, "feature '%s': a uint8 feature is one bytes value of raw "
                      "pixels; this one has %zu values", f->name, v->bytes_list->n_value);
    have = v->bytes_list->value[0].len;
    const uint8_t *b = v->bytes_list->value[0].data;
    for (size_t i = 0; have == want && i < want; i++) dst[i] = (float)b[i] * (1.0f / 255.0f);
  }
  if (have != want)
    return st_error(ST_ERR_FORMAT, "feature '%s': %zu values, the spec's shape holds %zu "
                    "(a FixedLenFeature; VarLen is not supported)", f->name, have, want);
  return ST_OK;
}

size_t st__example_decode_budget(size_t size, size_t max_record_bytes) {
  size_t cap = max_record_bytes + DECODE_SLACK;
  return size > (cap - DECODE_SLACK) / DECODE_FACTOR ? cap : DECODE_FACTOR * size + DECODE_SLACK;
}

/* protobuf-c's allocations, counted (requested bytes + ALLOC_OVERHEAD each,
 * never decremented: the total bounds the peak) and refused past limit. */
typedef struct budget {
  size_t used, limit;
  bool over, nomem;
} budget;

/* Every block carries a 16-byte header: its mapped length (0: malloc'd). */
static void *budget_alloc(void *data, size_t n) {
  budget *b = data;
  if (n > b->limit || b->limit - b->used < n + 2 * ALLOC_OVERHEAD) {
    b->over = true;
    return NULL;
  }
  b->used += n + 2 * ALLOC_OVERHEAD;
  size_t len = n + 16;
  uint8_t *p;
  if (len >= ALLOC_MAPPED) {
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = NULL;
  } else {
    p = malloc(len);
    len = 0;
  }
  if (!p) {
    b->nomem = true;
    return NULL;
  }
  memcpy(p, &len, sizeof len);
  return p + 16;
}

static void budget_free(void *data, void *q) {
  (void)data;
  if (!q) return;
  uint8_t *p = (uint8_t *)q - 16;
  size_t len;
  memcpy(&len, p, sizeof len);
  if (len) munmap(p, len);
  else free(p);
}

st_status st__parse_example_bounded(const void *data, size_t size, const st_example_spec *spec,
                                    float *x, float *y, size_t limit, bool *over) {
  if (over) *over = false;
  if (!spec || !x || (!data && size)) return st_error(ST_ERR_INVALID, "parse_example: NULL argument");
  budget b = {0, limit, false, false};
  ProtobufCAllocator a = {budget_alloc, budget_free, &b};
  Tensorflow__Example *ex = tensorflow__example__unpack(&a, size, data);
  if (!ex && b.over) {
    if (over) *over = true;
    return st_error(ST_ERR_FORMAT, "tf.train.Example of %zu bytes: decoding it needs more than "
                    "%zu bytes, the decode budget (8 x the record + 64 KiB, at most "
                    "max_record_bytes + 64 KiB): a bomb of tiny entries (empty map entries, "
                    "unpacked repeated values), refused", size, limit);
  }
  if (!ex && b.nomem)
    return st_error(ST_ERR_NOMEM, "tf.train.Example of %zu bytes: out of memory decoding it "
                    "(%zu bytes allocated)", size, b.used);
  if (!ex)
    return st_error(ST_ERR_FORMAT, "not a tf.train.Example (protobuf-c could not parse %zu "
                    "bytes)", size);
  st_status s = fill(ex, &spec->x, x);
  if (s == ST_OK && spec->y.name[0]) s = fill(ex, &spec->y, y);
  tensorflow__example__free_unpacked(ex, &a);
  return s;
}

st_status st_parse_example(const void *data, size_t size, const st_example_spec *spec,
                           float *x, float *y) {
  if (!data && size) return st_error(ST_ERR_INVALID, "%s: data is NULL (size %zu)", __func__, size);
  ST_REQUIRE(spec);
  ST_REQUIRE(x);
  if (!y && spec->y.name[0]) return st_error(ST_ERR_INVALID, "%s: y is NULL", __func__);
  return st__parse_example_bounded(data, size, spec, x, y,
                                   st__example_decode_budget(size, DECODE_DEFAULT_MAX), NULL);
}

/* ---- serializing ---- */
/* Each feature has a name, a known dtype and data for its count. */
static st_status check_features(const st_feature_value *f, int n) {
  const char *fn = "st_example_serialize";
  for (int i = 0; i < n; i++) {
    if (!f[i].name) return st_error(ST_ERR_INVALID, "%s: f[%d].name is NULL", fn, i);
    if ((int)f[i].dtype < 0 || f[i].dtype >= ST_FEATURE_DTYPE_COUNT)
      return st_error(ST_ERR_INVALID, "%s: f[%d] ('%s'): dtype %d is not a feature dtype", fn,
                      i, f[i].name, (int)f[i].dtype);
    if (!f[i].data && f[i].count)
      return st_error(ST_ERR_INVALID, "%s: f[%d] ('%s'): data is NULL with count %zu", fn, i,
                      f[i].name, f[i].count);
  }
  return ST_OK;
}

st_status st_example_serialize(const st_feature_value *f, int n, void **out, size_t *size) {
  ST_REQUIRE(out);
  ST_REQUIRE(size);
  *out = NULL;
  *size = 0;
  if (n < 0) return st_error(ST_ERR_INVALID, "%s: n is %d, must be >= 0", __func__, n);
  if (!f && n > 0) return st_error(ST_ERR_INVALID, "%s: f is NULL (n %d)", __func__, n);
  st_status v = check_features(f, n);
  if (v != ST_OK) return v;
  Tensorflow__Features__FeatureEntry *entries = calloc((size_t)n + 1, sizeof *entries);
  Tensorflow__Features__FeatureEntry **ptrs = calloc((size_t)n + 1, sizeof *ptrs);
  Tensorflow__Feature *feats = calloc((size_t)n + 1, sizeof *feats);
  Tensorflow__FloatList *fl = calloc((size_t)n + 1, sizeof *fl);
  Tensorflow__Int64List *il = calloc((size_t)n + 1, sizeof *il);
  Tensorflow__BytesList *bl = calloc((size_t)n + 1, sizeof *bl);
  ProtobufCBinaryData *bd = calloc((size_t)n + 1, sizeof *bd);
  st_status s = ST_OK;
  if (!entries || !ptrs || !feats || !fl || !il || !bl || !bd) {
    s = st_error(ST_ERR_NOMEM, "example_serialize: out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    tensorflow__features__feature_entry__init(&entries[i]);
    tensorflow__feature__init(&feats[i]);
    entries[i].key = (char *)f[i].name;
    entries[i].value = &feats[i];
    ptrs[i] = &entries[i];
    if (f[i].dtype == ST_FEATURE_FLOAT32) {
      tensorflow__float_list__init(&fl[i]);
      fl[i].n_value = f[i].count;
      fl[i].value = (float *)f[i].data;
      feats[i].kind_case = TENSORFLOW__FEATURE__KIND_FLOAT_LIST;
      feats[i].float_list = &fl[i];
    } else if (f[i].dtype == ST_FEATURE_INT64) {
      tensorflow__int64_list__init(&il[i]);
      il[i].n_value = f[i].count;
      il[i].value = (int64_t *)f[i].data;
      feats[i].kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
      feats[i].int64_list = &il[i];
    } else {
      tensorflow__bytes_list__init(&bl[i]);
      bd[i] = (ProtobufCBinaryData){f[i].count, (uint8_t *)f[i].data};
      bl[i].n_value = 1;
      bl[i].value = &bd[i];
      feats[i].kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST;
      feats[i].bytes_list = &bl[i];
    }
  }
  Tensorflow__Features fs = TENSORFLOW__FEATURES__INIT;
  fs.n_feature = (size_t)n;
  fs.feature = ptrs;
  Tensorflow__Example ex = TENSORFLOW__EXAMPLE__INIT;
  ex.features = &fs;
  *size = tensorflow__example__get_packed_size(&ex);
  if (!(*out = malloc(*size ? *size : 1))) {
    s = st_error(ST_ERR_NOMEM, "example_serialize: out of memory for %zu bytes", *size);
    goto done;
  }
  tensorflow__example__pack(&ex, *out);
done:
  free(entries);
  free(ptrs);
  free(feats);
  free(fl);
  free(il);
  free(bl);
  free(bd);
  return s;
}

/* ---- the JSON spec ---- */
static st_status load_feature(const char *path, const char *key, json_t *o, st_feature_spec *f) {
  if (!json_is_object(o)) return st_error(ST_ERR_FORMAT, "%s: \"%s\": expected an object", path, key);
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) /* a key we do not read (default_value, ...) is not ignored silently */
    if (strcmp(k, "name") && strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "var_len"))
      return st_error(ST_ERR_FORMAT, "%s: \"%s\".%s: unknown key (expected name, dtype, shape; "
                      "default values are not supported)", path, key, k);
  json_t *name = json_object_get(o, "name"), *dt = json_object_get(o, "dtype");
  json_t *shape = json_object_get(o, "shape"), *var = json_object_get(o, "var_len");
  if (!json_is_string(name) || !json_string_value(name)[0] ||
      strlen(json_string_value(name)) >= sizeof f->name)
    return st_error(ST_ERR_FORMAT, "%s: \"%s\".name: expected a feature name (1..%zu chars)",
                    path, key, sizeof f->name - 1);
  strcpy(f->name, json_string_value(name));
  if (json_is_true(var) || (shape && json_is_null(shape)))
    return st_error(ST_ERR_FORMAT, "%s: \"%s\": VarLenFeature is not supported (give a fixed "
                    "\"shape\")", path, key);
  int d = -1;
  for (int i = 0; json_is_string(dt) && i < ST_FEATURE_DTYPE_COUNT; i++)
    if (!strcmp(json_string_value(dt), dtype_names[i])) d = i;
  if (d < 0)
    return st_error(ST_ERR_FORMAT, "%s: \"%s\".dtype: expected \"float32\", \"int64\" or "
                    "\"uint8\"", path, key);
  f->dtype = (st_feature_dtype)d;
  f->shape.rank = 0;
  if (!shape) return ST_OK;
  if (!json_is_array(shape) || json_array_size(shape) > ST_MAX_RANK)
    return st_error(ST_ERR_FORMAT, "%s: \"%s\".shape: expected an array of at most %d sizes",
                    path, key, ST_MAX_RANK);
  size_t total = 1;
  for (size_t i = 0; i < json_array_size(shape); i++) {
    json_t *v = json_array_get(shape, i);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 24))
      return st_error(ST_ERR_FORMAT, "%s: \"%s\".shape[%zu]: expected a size 1..%d (a fixed "
                      "shape; VarLenFeature is not supported)", path, key, i, 1 << 24);
    f->shape.dims[f->shape.rank++] = (int)json_integer_value(v);
    total *= (size_t)json_integer_value(v);
    if (total > (1u << 28))
      return st_error(ST_ERR_FORMAT, "%s: \"%s\".shape: more than 2^28 values", path, key);
  }
  return ST_OK;
}

st_status st_example_spec_load(const char *path, st_example_spec *out) {
  ST_REQUIRE(path);
  ST_REQUIRE(out);
  memset(out, 0, sizeof *out);
  char *text = NULL; /* a regular file only: a FIFO is an error, never a wait */
  size_t len = 0;
  st_status rs = st__read_all(path, 1 << 20, &text, &len);
  if (rs != ST_OK) return rs;
  json_error_t e;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
  free(text);
  if (!root)
    return st_error(ST_ERR_FORMAT, "%s: line %d: %s", path, e.line, e.text);
  st_status s;
  if (!json_is_object(root)) {
    s = st_error(ST_ERR_FORMAT, "%s: expected an object with \"x\" and \"y\"", path);
  } else if (!json_object_get(root, "x")) {
    s = st_error(ST_ERR_FORMAT, "%s: \"x\": missing (the feature the model reads)", path);
  } else {
    s = load_feature(path, "x", json_object_get(root, "x"), &out->x);
    if (s == ST_OK && json_object_get(root, "y"))
      s = load_feature(path, "y", json_object_get(root, "y"), &out->y);
  }
  json_decref(root);
  return s;
}
