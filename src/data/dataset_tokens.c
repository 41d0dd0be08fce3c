/* The token-shard dataset source (data.h, st_dataset_from_token_files):
 * language-model windows of seq_len + 1 tokens over memory-mapped shards in
 * llm.c's format, FILE-sharded when asked (and by auto-shard: ops->reshard),
 * in file order or shuffled. The shuffle is a seeded pseudo-random
 * permutation of the window indices computed per index (a 4-round Feistel
 * network over the next power of 4, cycle-walked into [0, windows)): no
 * memory per window, a new order per epoch from (seed, epoch), and skipping
 * (a resumed run) costs nothing. Memory: the mappings (pages the kernel
 * loads as windows are read) and one element. */
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "data/dataset_impl.h"
#include "data/tokens.h"

typedef struct tok_node {
  st_dataset base;
  st_token_dataset_options o;
  st__token_file *files; /* [nfiles] this shard's files, mapped */
  int64_t *first;        /* [nfiles + 1] index of each file's first window; first[nfiles] = all */
  int nfiles;
  int64_t ntok;          /* tokens of all files */
} tok_node;

/* A bijection of [0, n): Feistel rounds over 2 * half bits, cycle-walked. */
typedef struct perm {
  uint64_t n, key[4];
  int half;
  uint64_t mask;
} perm;

typedef struct tok_iter {
  st_iterator base;
  tok_node *src;
  int64_t pos; /* windows handed out in this pass */
  perm p;
  float *x, *y; /* [T], [T]: the element next hands out */
} tok_iter;

static uint64_t mix64(uint64_t z) { /* SplitMix64's finaliser */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void perm_init(perm *p, uint64_t n, uint64_t seed, uint64_t epoch) {
  p->n = n;
  p->half = 1;
  while (p->half < 32 && (1ull << (2 * p->half)) < n) p->half++;
  p->mask = (1ull << p->half) - 1;
  st_rng r = st_rng_make(seed ^ 0x746f6b656e73ull, epoch); /* "tokens" */
  for (int i = 0; i < 4; i++) p->key[i] = st_rng_u64(&r);
}

static uint64_t perm_at(const perm *p, uint64_t i) {
  uint64_t x = i;
  do {
    uint64_t l = x >> p->half, r = x & p->mask;
    for (int k = 0; k < 4; k++) {
      uint64_t t = l ^ (mix64(r ^ p->key[k]) & p->mask);
      l = r;
      r = t;
    }
    x = l << p->half | r;
  } while (x >= p->n);
  return x;
}

/* The file holding window w (binary search over first[]). */
static int file_of(const tok_node *n, int64_t w) {
  int lo = 0, hi = n->nfiles - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (n->first[mid] <= w) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

static st_status tok_next_into(st_iterator *base, float *x, float *y, bool *end) {
  tok_iter *it = (tok_iter *)base;
  const tok_node *n = it->src;
  int64_t total = n->first[n->nfiles];
  if (it->pos >= total) return *end = true, ST_OK;
  int64_t w = n->o.shuffle ? (int64_t)perm_at(&it->p, (uint64_t)it->pos) : it->pos;
  it->pos++;
  int f = file_of(n, w);
  const st__token_file *tf = &n->files[f];
  int T = n->o.seq_len;
  int64_t at = (w - n->first[f]) * T;
  float prev = (float)st__token_at(tf, at);
  for (int i = 0; i < T; i++) {
    float next = (float)st__token_at(tf, at + i + 1);
    x[i] = prev;
    y[i] = next;
    prev = next;
  }
  return ST_OK;
}

static st_status tok_next(st_iterator *base, st_batch *out, bool *end) {
  tok_iter *it = (tok_iter *)base;
  st_status s = tok_next_into(base, it->x, it->y, end);
  if (s == ST_OK && !*end) *out = (st_batch){1, it->x, it->y};
  return s;
}

static st_status tok_skip(st_iterator *base, int64_t k, int64_t *done) {
  tok_iter *it = (tok_iter *)base;
  int64_t left = it->src->first[it->src->nfiles] - it->pos;
  *done = k < left ? k : left;
  it->pos += *done;
  return ST_OK;
}

static void tok_iter_destroy(st_iterator *base) {
  tok_iter *it = (tok_iter *)base;
  free(it->x);
  free(it);
}

static const st__iter_ops tok_iter_ops = {tok_next, tok_next_into, tok_skip, tok_iter_destroy};

static st_status tok_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  tok_node *n = (tok_node *)ds;
  tok_iter *it = calloc(1, sizeof *it);
  if (it) it->x = calloc(2 * (size_t)n->o.seq_len, sizeof(float));
  if (!it || !it->x) {
    free(it);
    return st_error(ST_ERR_NOMEM, "token dataset: out of memory for an iterator");
  }
  it->base.ops = &tok_iter_ops;
  it->src = n;
  it->y = it->x + n->o.seq_len;
  perm_init(&it->p, (uint64_t)n->first[n->nfiles], n->o.seed, epoch);
  *out = &it->base;
  return ST_OK;
}

static void tok_destroy(st_dataset *ds) {
  tok_node *n = (tok_node *)ds;
  for (int i = 0; n->files && i < n->nfiles; i++) st__token_file_close(&n->files[i]);
  free(n->files);
  free(n->first);
}

static int tok_file_count(const st_dataset *ds, bool *sharded) {
  const tok_node *n = (const tok_node *)ds;
  *sharded = n->o.num_shards != 1;
  return n->nfiles;
}

static st_status tok_reshard(const st_dataset *ds, int num_shards, int shard_index,
                             st_dataset **out) {
  const tok_node *n = (const tok_node *)ds;
  const char **paths = calloc((size_t)n->nfiles, sizeof *paths);
  if (!paths) return st_error(ST_ERR_NOMEM, "token dataset: out of memory");
  for (int i = 0; i < n->nfiles; i++) paths[i] = n->files[i].path;
  st_token_dataset_options o = n->o;
  o.num_shards = num_shards;
  o.shard_index = shard_index;
  st_status s = st_dataset_from_token_files(paths, n->nfiles, &o, out);
  free(paths);
  return s;
}

static const st__ds_ops tok_ops = {"token shards", tok_iterate, tok_destroy, NULL,
                                   tok_file_count, tok_reshard};

st_token_dataset_options st_token_dataset_default_options(void) {
  st_token_dataset_options o;
  memset(&o, 0, sizeof o);
  o.seq_len = 64;
  o.shuffle = true;
  o.num_shards = 1;
  return o;
}

static st_status check_options(int nfiles, const st_token_dataset_options *o) {
  if (o->seq_len < 1 || o->seq_len > (1 << 24))
    return st_error(ST_ERR_INVALID, "token dataset: seq_len %d (must be in 1..2^24)", o->seq_len);
  if (o->vocab < 0)
    return st_error(ST_ERR_INVALID, "token dataset: vocab %lld (must be >= 0; 0 = no check)",
                    (long long)o->vocab);
  if (o->num_shards < 1 || o->shard_index < 0 || o->shard_index >= o->num_shards)
    return st_error(ST_ERR_INVALID, "token dataset: shard %d of %d", o->shard_index, o->num_shards);
  if (nfiles < o->num_shards)
    return st_error(ST_ERR_INVALID, "token dataset: auto-shard FILE over %d workers needs at "
                    "least %d files, got %d (use auto-shard data, or write more shards: "
                    "strata tokenize --shard-tokens)", o->num_shards, o->num_shards, nfiles);
  return ST_OK;
}

/* Map and check files[i] for this shard into n; fills first[]. */
static st_status open_files(tok_node *n, const char *const *files, int nfiles) {
  const st_token_dataset_options *o = &n->o;
  for (int i = o->shard_index; i < nfiles; i += o->num_shards) {
    if (!files[i]) return st_error(ST_ERR_INVALID, "st_dataset_from_token_files: file %d is NULL", i);
    st__token_file *f = &n->files[n->nfiles];
    st_status s = st__token_file_open(files[i], o->vocab, f);
    if (s != ST_OK) return s;
    n->nfiles++;
    if (f->ntok < (int64_t)o->seq_len + 1)
      return st_error(ST_ERR_FORMAT, "%s: offset 8: %lld tokens, fewer than seq_len + 1 = %d "
                      "(one window)", f->path, (long long)f->ntok, o->seq_len + 1);
    n->first[n->nfiles] = n->first[n->nfiles - 1] + (f->ntok - 1) / o->seq_len;
    n->ntok += f->ntok;
  }
  return ST_OK;
}

st_status st_dataset_from_token_files(const char *const *files, int nfiles,
                                      const st_token_dataset_options *o, st_dataset **out) {
  ST_REQUIRE(files);
  ST_REQUIRE(out);
  *out = NULL;
  st_token_dataset_options opt = o ? *o : st_token_dataset_default_options();
  if (nfiles < 1) return st_error(ST_ERR_INVALID, "st_dataset_from_token_files: no files");
  st_status s = check_options(nfiles, &opt);
  if (s != ST_OK) return s;
  tok_node *n = calloc(1, sizeof *n);
  int keep = (nfiles - opt.shard_index + opt.num_shards - 1) / opt.num_shards;
  if (n) n->base.ops = &tok_ops; /* st_dataset_destroy can free it from here on */
  if (!n || !(n->files = calloc((size_t)keep, sizeof *n->files)) ||
      !(n->first = calloc((size_t)keep + 1, sizeof *n->first))) {
    st_dataset_destroy(n ? &n->base : NULL);
    return st_error(ST_ERR_NOMEM, "st_dataset_from_token_files: out of memory");
  }
  n->o = opt;
  if ((s = open_files(n, files, nfiles)) != ST_OK) {
    st_dataset_destroy(&n->base);
    return s;
  }
  st_dataset *ds = &n->base;
  ds->x_shape = (st_shape){1, {opt.seq_len}};
  ds->x_size = ds->y_size = (size_t)opt.seq_len;
  ds->cardinality = n->first[n->nfiles];
  *out = ds;
  return ST_OK;
}

static const tok_node *find_source(const st_dataset *ds) {
  while (ds && ds->input) ds = ds->input;
  return ds && ds->ops == &tok_ops ? (const tok_node *)ds : NULL;
}

int64_t st_dataset_token_count(const st_dataset *ds) {
  const tok_node *n = find_source(ds);
  return n ? n->ntok : 0;
}

int st_dataset_token_file_count(const st_dataset *ds) {
  const tok_node *n = find_source(ds);
  return n ? n->nfiles : 0;
}
