/* The gradient reducer: bucket planning and, with overlap, one communication
 * thread per replica draining that replica's ready buckets in order. Counters
 * are absolute (they grow across steps), so a step needs no reset: bucket k of
 * a step is ready when ready > k and reduced when done > k. */
#include "distribute/reducer.h"

#include "base/error_slot.h"
#include <pthread.h>
#include <stdlib.h>

typedef struct rank_state {
  st_reducer *red;
  int rank;
  float *grads;
  int next;             /* compute side: next bucket of this step to signal */
  uint64_t ready, done; /* buckets signalled / reduced so far (guarded by mu) */
  st_error_slot status;  /* first collective failure (guarded by mu) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool started;
  bool stop;            /* guarded by mu */
} rank_state;

struct st_reducer {
  int n, nb;
  st_bucket *buckets; /* [nb], in the order backward completes them */
  bool overlap;
  st_collective *coll; /* the communication threads' own collective */
  rank_state ranks[ST_MAX_REPLICAS];
};

/* Buckets from the last layer backwards; a bucket closes at a layer with
 * trainable params once it holds bytes_per_pack bytes (0: never). */
static st_status plan(st_reducer *r, const st_net *m, size_t bytes_per_pack) {
  r->buckets = calloc((size_t)m->nlayers + 1, sizeof *r->buckets);
  if (!r->buckets) return st_error(ST_ERR_NOMEM, "reducer: out of memory");
  size_t hi = m->n_params, lo = hi;
  for (int i = m->nlayers - 1; i >= 0; i--) {
    const st_layer *l = m->layers[i];
    for (int p = 0; p < l->nparams; p++)
      if (l->params[p].trainable && l->params[p].offset < lo) lo = l->params[p].offset;
    bool full = bytes_per_pack && (hi - lo) * sizeof(float) >= bytes_per_pack;
    if (hi > lo && (full || i == 0)) {
      r->buckets[r->nb++] = (st_bucket){lo, hi - lo, i};
      hi = lo;
    }
  }
  return ST_OK;
}

static void *comm_main(void *arg) {
  rank_state *rs = arg;
  st_reducer *r = rs->red;
  pthread_mutex_lock(&rs->mu);
  for (;;) {
    while (rs->ready == rs->done && !rs->stop) pthread_cond_wait(&rs->cv, &rs->mu);
    if (rs->stop) break;
    const st_bucket *b = &r->buckets[rs->done % (uint64_t)r->nb];
    pthread_mutex_unlock(&rs->mu);
    st_status s = r->coll->vt->all_reduce(r->coll, rs->rank, rs->grads + b->lo, b->len,
                                          ST_REDUCE_SUM);
    pthread_mutex_lock(&rs->mu);
    st__error_keep(&rs->status, s);
    rs->done++;
    pthread_cond_broadcast(&rs->cv);
  }
  pthread_mutex_unlock(&rs->mu);
  return NULL;
}

st_status st__reducer_create(const st_net *m, int n, float *const *grads, size_t bytes_per_pack,
                             bool overlap, st_cross_device_ops algo, st_collective *net,
                             st_backend_ctx *const *device_ctxs, st_reducer **out) {
  *out = NULL;
  st_reducer *r = calloc(1, sizeof *r);
  if (!r) return st_error(ST_ERR_NOMEM, "reducer: out of memory");
  r->n = n;
  r->overlap = overlap && n * (net ? net->size : 1) > 1;
  st_status s = plan(r, m, bytes_per_pack);
  ST_ASSERT(!device_ctxs || !r->overlap);
  if (s == ST_OK && device_ctxs)
    s = st__collective_device_create(n, algo, net, device_ctxs, &r->coll);
  else if (s == ST_OK)
    s = net ? st__collective_hier_create(n, algo, net, &r->coll)
            : st__collective_threads_create(n, algo, &r->coll);
  for (int i = 0; s == ST_OK && i < n; i++) {
    rank_state *rs = &r->ranks[i];
    *rs = (rank_state){.red = r, .rank = i, .grads = grads[i]};
    pthread_mutex_init(&rs->mu, NULL);
    pthread_cond_init(&rs->cv, NULL);
    if (r->overlap && r->nb > 0) {
      if (pthread_create(&rs->thread, NULL, comm_main, rs) != 0)
        s = st_error(ST_ERR_INTERNAL, "reducer: cannot start communication thread %d", i);
      rs->started = s == ST_OK;
    }
  }
  if (s != ST_OK) {
    st__reducer_destroy(r);
    return s;
  }
  *out = r;
  return ST_OK;
}

void st__reducer_destroy(st_reducer *r) {
  if (!r) return;
  for (int i = 0; i < r->n; i++) {
    rank_state *rs = &r->ranks[i];
    if (!rs->red) continue; /* never initialised */
    pthread_mutex_lock(&rs->mu);
    rs->stop = true;
    pthread_cond_broadcast(&rs->cv);
    pthread_mutex_unlock(&rs->mu);
  }
  for (int i = 0; i < r->n; i++) {
    rank_state *rs = &r->ranks[i];
    if (rs->started) pthread_join(rs->thread, NULL);
    if (rs->red) {
      pthread_mutex_destroy(&rs->mu);
      pthread_cond_destroy(&rs->cv);
    }
  }
  st__collective_destroy(r->coll);
  free(r->buckets);
  free(r);
}

int st__reducer_bucket_count(const st_reducer *r) { return r->nb; }
const st_bucket *st__reducer_bucket(const st_reducer *r, int k) { return &r->buckets[k]; }
void *st__reducer_ctx(st_reducer *r, int rank) { return &r->ranks[rank]; }

void st__reducer_layer_done(void *ctx, int layer) {
  rank_state *rs = ctx;
  st_reducer *r = rs->red;
  if (!r->overlap || rs->next >= r->nb || r->buckets[rs->next].first_layer != layer) return;
  rs->next++;
  pthread_mutex_lock(&rs->mu);
  rs->ready++;
  pthread_cond_broadcast(&rs->cv);
  pthread_mutex_unlock(&rs->mu);
}

st_status st__reducer_finish(st_reducer *r, int rank) {
  rank_state *rs = &r->ranks[rank];
  if (!r->overlap) {
    st_status s = ST_OK;
    for (int k = 0; k < r->nb && s == ST_OK; k++)
      s = r->coll->vt->all_reduce(r->coll, rank, rs->grads + r->buckets[k].lo, r->buckets[k].len,
                                  ST_REDUCE_SUM);
    return s;
  }
  ST_ASSERT(rs->next == r->nb); /* backward signalled every bucket */
  rs->next = 0;
  pthread_mutex_lock(&rs->mu);
  while (rs->done < rs->ready) pthread_cond_wait(&rs->cv, &rs->mu);
  st_status s = st__error_raise(&rs->status);
  pthread_mutex_unlock(&rs->mu);
  return s;
}
