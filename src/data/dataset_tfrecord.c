/* The TFRecord dataset source: tf.train.Example records streamed from a list
 * of files (FILE-sharded when asked), read one file after another or
 * interleaved (cycle_length files open, block_length records from each in
 * turn, a finished file's slot taken by the next file: tf.data's order), each
 * record parsed with the feature spec into a float element. Memory: one
 * reader (input buffer + record buffer) per open file. Also list_files.
 * num_parallel_calls: the iterator of dataset_tfrecord_parallel.c. */
#include <fnmatch.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "data/dataset_impl.h"
#include "data/tfrecord_ds.h"

typedef struct tfr_slot {
  st_tfrecord_reader *r; /* NULL: free */
  int file;              /* index into node->files */
  int64_t seen_skipped;  /* r's skipped count already added to the node */
} tfr_slot;

typedef struct tfr_iter {
  st_iterator base;
  tfr_node *src;
  tfr_slot *slots; /* [cycle] */
  int cycle, cur;  /* slots; the one being read */
  int in_block;    /* records taken from cur in this block */
  int next_file;   /* the next file to open */
  int open;        /* slots with a reader */
  float *x, *y;    /* [x_size], [y_size]: the element next hands out */
} tfr_iter;

st_tfrecord_dataset_options st_tfrecord_dataset_default_options(void) {
  st_tfrecord_dataset_options o;
  memset(&o, 0, sizeof o);
  o.record = st_tfrecord_default_options();
  o.num_shards = 1;
  o.cycle_length = 1;
  o.block_length = 1;
  return o;
}

static void close_slot(tfr_iter *it, tfr_slot *sl) {
  if (!sl->r) return;
  int64_t d = st_tfrecord_reader_skipped(sl->r) - sl->seen_skipped;
  if (d > 0) __atomic_fetch_add(&it->src->skipped, d, __ATOMIC_RELAXED);
  st_tfrecord_reader_destroy(sl->r);
  sl->r = NULL;
}

/* Open the next file into slot sl. */
static st_status open_slot(tfr_iter *it, tfr_slot *sl) {
  sl->file = it->next_file++;
  sl->seen_skipped = 0;
  st_status s = st_tfrecord_reader_create(it->src->files[sl->file], &it->src->o.record, &sl->r);
  if (s == ST_OK) it->open++;
  st__tfrecord_reader_pool(sl->r);
  return s;
}

static void next_slot(tfr_iter *it) {
  it->cur = (it->cur + 1) % it->cycle;
  it->in_block = 0;
}

/* tf.data's interleave loop: an empty slot takes the next file when the cycle
 * reaches it; a block of block_length records from a slot, then the next
 * slot; a finished file empties its slot and the cycle moves on. */
static st_status tfr_next_into(st_iterator *base, float *x, float *y, bool *end) {
  tfr_iter *it = (tfr_iter *)base;
  for (;;) {
    tfr_slot *sl = &it->slots[it->cur];
    st_status s;
    if (!sl->r) {
      if (it->next_file < it->src->nfiles) {
        if ((s = open_slot(it, sl)) != ST_OK) return s;
      } else if (it->open == 0) {
        return *end = true, ST_OK;
      } else {
        next_slot(it);
      }
      continue;
    }
    const void *rec;
    size_t n;
    bool done;
    uint64_t at = st_tfrecord_reader_offset(sl->r);
    if ((s = st_tfrecord_reader_next(sl->r, &rec, &n, &done)) != ST_OK) return s;
    int64_t d = st_tfrecord_reader_skipped(sl->r) - sl->seen_skipped;
    if (d > 0) {
      __atomic_fetch_add(&it->src->skipped, d, __ATOMIC_RELAXED);
      sl->seen_skipped += d;
    }
    if (done) {
      close_slot(it, sl);
      it->open--;
      next_slot(it);
      continue;
    }
    bool skipped;
    if ((s = st__tfr_parse(it->src, sl->file, sl->r, at, rec, n, x, y, &skipped)) != ST_OK) return s;
    if (skipped) continue;
    if (++it->in_block >= it->src->o.block_length) next_slot(it);
    return ST_OK;
  }
}

st_status st__tfr_parse(tfr_node *src, int file, st_tfrecord_reader *r, uint64_t at,
                        const void *rec, size_t n, float *x, float *y, bool *skipped) {
  bool over;
  size_t limit = st__example_decode_budget(n, src->o.record.max_record_bytes ?
                                              src->o.record.max_record_bytes : (64u << 20));
  st_status s = st__parse_example_bounded(rec, n, &src->o.spec, x, y, limit, &over);
  st__tfrecord_reader_release(r);
  *skipped = s != ST_OK && over && src->o.record.skip_corrupt;
  if (*skipped) {
    __atomic_fetch_add(&src->skipped, 1, __ATOMIC_RELAXED);
    return ST_OK;
  }
  if (s != ST_OK && over) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st_last_error());
    return st_error(s, "%s: record at offset %llu: %s (--skip-corrupt-records / skip_corrupt "
                    "skips such records)", src->files[file], (unsigned long long)at, msg);
  }
  if (s != ST_OK)
    return st_error_prefix(s, "%s: record at offset %llu: ", src->files[file], (unsigned long long)at);
  return ST_OK;
}

static st_status tfr_next(st_iterator *base, st_batch *out, bool *end) {
  tfr_iter *it = (tfr_iter *)base;
  st_status s = tfr_next_into(base, it->x, it->y, end);
  if (s == ST_OK && !*end) *out = (st_batch){1, it->x, it->y};
  return s;
}

static void tfr_iter_destroy(st_iterator *base) {
  tfr_iter *it = (tfr_iter *)base;
  for (int k = 0; it->slots && k < it->cycle; k++) close_slot(it, &it->slots[k]);
  free(it->slots);
  free(it->x);
  free(it);
}

static const st__iter_ops tfr_iter_ops = {tfr_next, tfr_next_into, NULL, tfr_iter_destroy};

static st_status tfr_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  (void)epoch; /* file order is fixed: shuffle files with st_list_files */
  tfr_node *src = (tfr_node *)ds;
  if (src->o.num_parallel_calls != 0) return st__tfr_parallel_iterate(src, out);
  tfr_iter *it = calloc(1, sizeof *it);
  if (!it) return st_error(ST_ERR_NOMEM, "tfrecord: out of memory for an iterator");
  it->base.ops = &tfr_iter_ops;
  it->src = src;
  it->cycle = src->o.cycle_length < src->nfiles ? src->o.cycle_length : src->nfiles;
  it->slots = calloc((size_t)it->cycle, sizeof *it->slots);
  it->x = calloc(ds->x_size + ds->y_size + 1, sizeof(float));
  if (!it->slots || !it->x) {
    tfr_iter_destroy(&it->base);
    return st_error(ST_ERR_NOMEM, "tfrecord: out of memory for an iterator");
  }
  it->y = it->x + ds->x_size;
  *out = &it->base;
  return ST_OK;
}

static void tfr_destroy(st_dataset *ds) {
  tfr_node *n = (tfr_node *)ds;
  st_list_files_free(n->files, n->nfiles);
}

static int tfr_file_count(const st_dataset *ds, bool *sharded) {
  const tfr_node *n = (const tfr_node *)ds;
  *sharded = n->o.num_shards != 1;
  return n->nfiles;
}

static const st__ds_ops tfr_ops = {"tfrecord", tfr_iterate, tfr_destroy, NULL,
                                   tfr_file_count, st__tfr_reshard};

static st_status check_options(int nfiles, const st_tfrecord_dataset_options *o) {
  const st_example_spec *sp = &o->spec;
  if (!sp->x.name[0]) return st_error(ST_ERR_INVALID, "tfrecord dataset: spec.x has no feature name");
  if (sp->x.dtype < 0 || sp->x.dtype >= ST_FEATURE_DTYPE_COUNT ||
      sp->y.dtype < 0 || sp->y.dtype >= ST_FEATURE_DTYPE_COUNT)
    return st_error(ST_ERR_INVALID, "tfrecord dataset: feature dtype out of range");
  if (sp->x.shape.rank < 0 || sp->x.shape.rank > ST_MAX_RANK || sp->y.shape.rank < 0 ||
      sp->y.shape.rank > ST_MAX_RANK)
    return st_error(ST_ERR_INVALID, "tfrecord dataset: feature shape rank out of range 0..%d",
                    ST_MAX_RANK);
  for (int i = 0; i < sp->x.shape.rank; i++)
    if (sp->x.shape.dims[i] < 1) return st_error(ST_ERR_INVALID, "tfrecord dataset: spec.x "
                                                 "dimension %d is %d", i, sp->x.shape.dims[i]);
  for (int i = 0; i < sp->y.shape.rank; i++)
    if (sp->y.shape.dims[i] < 1) return st_error(ST_ERR_INVALID, "tfrecord dataset: spec.y "
                                                 "dimension %d is %d", i, sp->y.shape.dims[i]);
  const st_feature_spec *fs[2] = {&sp->x, &sp->y};
  for (int k = 0; k < 2; k++) { /* at most 2^28 values a feature: no size overflow */
    uint64_t n = 1;
    for (int i = 0; i < fs[k]->shape.rank && n <= (1u << 28); i++) n *= (uint64_t)fs[k]->shape.dims[i];
    if (n > (1u << 28))
      return st_error(ST_ERR_INVALID, "tfrecord dataset: spec.%s has more than 2^28 values",
                      k ? "y" : "x");
  }
  if (o->num_shards < 1 || o->shard_index < 0 || o->shard_index >= o->num_shards)
    return st_error(ST_ERR_INVALID, "tfrecord dataset: shard %d of %d", o->shard_index,
                    o->num_shards);
  if (nfiles < o->num_shards)
    return st_error(ST_ERR_INVALID, "tfrecord dataset: auto-shard FILE over %d workers needs at "
                    "least %d files, got %d (use auto-shard data, or write more shards)",
                    o->num_shards, o->num_shards, nfiles);
  if (o->cycle_length < 1 || o->block_length < 1)
    return st_error(ST_ERR_INVALID, "tfrecord dataset: interleave cycle_length %d, "
                    "block_length %d (both must be >= 1)", o->cycle_length, o->block_length);
  if (o->num_parallel_calls != ST_AUTOTUNE &&
      (o->num_parallel_calls < 0 || o->num_parallel_calls > ST__TFR_MAX_THREADS))
    return st_error(ST_ERR_INVALID, "tfrecord dataset: interleave num_parallel_calls %d must be "
                    "in 0..%d or -1 (ST_AUTOTUNE)", o->num_parallel_calls, ST__TFR_MAX_THREADS);
  return ST_OK;
}

st_status st_dataset_tfrecord(const char *const *files, int nfiles,
                              const st_tfrecord_dataset_options *o, st_dataset **out) {
  ST_REQUIRE(files);
  ST_REQUIRE(o);
  ST_REQUIRE(out);
  *out = NULL;
  if (!files || !o || nfiles < 1)
    return st_error(ST_ERR_INVALID, "st_dataset_tfrecord: %s", nfiles < 1 ? "no files" : "NULL argument");
  st_status s = check_options(nfiles, o);
  if (s != ST_OK) return s;
  tfr_node *n = calloc(1, sizeof *n);
  int keep = (nfiles - o->shard_index + o->num_shards - 1) / o->num_shards;
  if (n) n->base.ops = &tfr_ops; /* st_dataset_destroy can free it from here on */
  if (!n || !(n->files = calloc((size_t)keep, sizeof *n->files))) goto fail_nomem;
  for (int i = o->shard_index; i < nfiles; i += o->num_shards) {
    if (!files[i]) {
      st_dataset_destroy(&n->base);
      return st_error(ST_ERR_INVALID, "st_dataset_tfrecord: file %d is NULL", i);
    }
    if (!(n->files[n->nfiles] = strdup(files[i]))) goto fail_nomem;
    n->nfiles++;
  }
  n->o = *o;
  st_dataset *ds = &n->base;
  ds->ops = &tfr_ops;
  ds->x_shape = o->spec.x.shape;
  if (ds->x_shape.rank == 0) ds->x_shape = (st_shape){1, {1}};
  ds->x_size = st_feature_spec_size(&o->spec.x);
  ds->y_size = o->spec.y.name[0] ? st_feature_spec_size(&o->spec.y) : 0;
  ds->cardinality = -2;
  *out = ds;
  return ST_OK;
fail_nomem:
  st_dataset_destroy(n ? &n->base : NULL);
  return st_error(ST_ERR_NOMEM, "st_dataset_tfrecord: out of memory");
}

static const tfr_node *find_source(const st_dataset *ds) {
  while (ds && ds->input) ds = ds->input;
  return ds && ds->ops == &tfr_ops ? (const tfr_node *)ds : NULL;
}

st_status st__tfr_reshard(const st_dataset *src, int num_shards, int shard_index,
                          st_dataset **out) {
  const tfr_node *n = (const tfr_node *)src;
  st_tfrecord_dataset_options o = n->o;
  o.num_shards = num_shards;
  o.shard_index = shard_index;
  return st_dataset_tfrecord((const char *const *)n->files, n->nfiles, &o, out);
}

int64_t st_dataset_tfrecord_skipped(const st_dataset *ds) {
  const tfr_node *n = find_source(ds);
  return n ? __atomic_load_n(&n->skipped, __ATOMIC_RELAXED) : 0;
}

int st_dataset_tfrecord_file_count(const st_dataset *ds) {
  const tfr_node *n = find_source(ds);
  return n ? n->nfiles : 0;
}

/* ---- list_files ---- */

/* path = PREFIX-IIIII-of-NNNNN[.SUFFIX] (the names `strata convert` and TF
 * write): its index and total, and where "-IIIII" starts; false otherwise. */
static bool shard_name(const char *path, int *index, int *total, size_t *at) {
  const char *base = strrchr(path, '/'), *of = NULL;
  base = base ? base + 1 : path;
  for (const char *q = strstr(base, "-of-"); q; q = strstr(q + 1, "-of-")) of = q;
  if (!of || of - base < 6) return false;
  const char *i0 = of - 5, *n0 = of + 4;
  for (int k = 0; k < 5; k++)
    if (i0[k] < '0' || i0[k] > '9' || n0[k] < '0' || n0[k] > '9') return false;
  if (i0[-1] != '-' || (n0[5] != '\0' && n0[5] != '.')) return false;
  *index = atoi(i0), *total = atoi(n0), *at = (size_t)(i0 - 1 - path);
  return *total > 0 && *index < *total;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A shard set the pattern covers but whose files are not all there (an
 * interrupted `strata convert`: each shard is written atomically, the set
 * is not; issue 29 D19): each shard's successor (cyclically) must be listed
 * when the pattern would match it. sorted: the files, sorted by strcmp. */
static st_status check_shard_sets(const char *pattern, char **sorted, int n) {
  for (int i = 0; i < n; i++) {
    int index, total;
    size_t at;
    if (!shard_name(sorted[i], &index, &total, &at)) continue;
    const char *rest = sorted[i] + at + 15; /* after "-IIIII-of-NNNNN" */
    char next[PATH_MAX], *key = next;
    if (snprintf(next, sizeof next, "%.*s-%05d-of-%05d%s", (int)at, sorted[i], (index + 1) % total,
                 total, rest) >= (int)sizeof next ||
        bsearch(&key, sorted, (size_t)n, sizeof *sorted, cmp_str) ||
        fnmatch(pattern, next, FNM_PATHNAME | FNM_PERIOD) != 0)
      continue;
    int have = 0;
    for (int j = 0; j < n; j++) {
      int jx, jt;
      size_t ja;
      have += shard_name(sorted[j], &jx, &jt, &ja) && jt == total && ja == at &&
              !strncmp(sorted[j], sorted[i], at) && !strcmp(sorted[j] + ja + 15, rest);
    }
    return st_error(ST_ERR_INVALID, "%s: shard %s is missing: %d of the %d files of its set are "
                    "there (an interrupted `strata convert`, or a copy that lost files; to "
                    "read part of a set, name those shards)", pattern, next, have, total);
  }
  return ST_OK;
}
void st_list_files_free(char **files, int n) {
  for (int i = 0; files && i < n; i++) free(files[i]);
  free(files);
}

st_status st_list_files(const char *pattern, bool shuffle, uint64_t seed, char ***files,
                        int *n) {
  ST_REQUIRE(pattern);
  ST_REQUIRE(files);
  ST_REQUIRE(n);
  *files = NULL;
  *n = 0;
  glob_t g;
  int rc = glob(pattern, 0, NULL, &g); /* sorted by name (not GLOB_NOSORT) */
  if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
    if (rc == 0) globfree(&g);
    return st_error(ST_ERR_INVALID, "%s: no files match", pattern);
  }
  if (rc != 0) return st_error(rc == GLOB_NOSPACE ? ST_ERR_NOMEM : ST_ERR_IO,
                               "%s: cannot list the files (glob error %d)", pattern, rc);
  if (g.gl_pathc > 1000000) {
    globfree(&g);
    return st_error(ST_ERR_INVALID, "%s: %zu files match (at most 1000000)", pattern, g.gl_pathc);
  }
  char **v = calloc(g.gl_pathc, sizeof *v);
  int count = (int)g.gl_pathc;
  for (int i = 0; v && i < count; i++)
    if (!(v[i] = strdup(g.gl_pathv[i]))) {
      st_list_files_free(v, i);
      v = NULL;
    }
  globfree(&g);
  if (!v) return st_error(ST_ERR_NOMEM, "%s: out of memory listing files", pattern);
  qsort(v, (size_t)count, sizeof *v, cmp_str); /* glob's order is the locale's */
  st_status st = check_shard_sets(pattern, v, count);
  if (st != ST_OK) {
    st_list_files_free(v, count);
    return st;
  }
  if (shuffle) { /* Fisher-Yates with the seeded counter-based RNG */
    st_rng r = st_rng_make(seed, 0x6c697374u);
    for (int i = count - 1; i > 0; i--) {
      int j = (int)st_rng_below(&r, (uint64_t)i + 1);
      char *t = v[i];
      v[i] = v[j];
      v[j] = t;
    }
  }
  *files = v;
  *n = count;
  return ST_OK;
}
