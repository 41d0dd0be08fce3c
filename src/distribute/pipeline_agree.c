/* What the processes of a pipeline must agree on before they exchange a
 * message (issue 29, D1/D3/D14): the flags that size every message (stage
 * count, micro-batches, schedule, stage boundaries) are all-gathered over
 * the cluster's control transport right after the model check and compared
 * with rank 0's before any stage buffer is sized; a difference fails on
 * every process naming the flag, the ranks and both values. Each step, every
 * process's digest of the global batch it read (CRC32C of the examples and of
 * the labels) travels with the step figures: the first stage feeds its own
 * examples and the last stage scores against its own labels, so processes
 * whose input pipelines differ (another --shuffle-buffer, other files) would
 * pair inputs with the wrong labels; the digests name the ranks instead.
 * Caller's thread (the control transport's). */
#include <stdio.h>
#include <string.h>

#include "base/crc32c.h"
#include "distribute/cluster.h"
#include "distribute/pipeline.h"

enum { NB = ST_MAX_REPLICAS + 1 };
typedef struct pipe_config { /* int32 fields only: exchanged as bytes */
  int32_t stages, micro_batches, schedule, bounds[NB]; /* bounds: first layer of stages 1..S-1 */
} pipe_config;
_Static_assert(sizeof(pipe_config) % sizeof(float) == 0, "exchanged as floats");

static const char *const g_flag[] = {"pipeline stages (--pipeline-stages)",
                                     "micro-batches (--micro-batches)",
                                     "schedule (--pipeline-schedule)",
                                     "stage boundaries (--stage-boundaries)"};

static void bounds_str(const pipe_config *c, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < c->stages - 1 && i < NB && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%d", i ? "," : "", (int)c->bounds[i]);
  if (!buf[0]) snprintf(buf, n, "none");
}

static void value_str(const pipe_config *c, int field, char *buf, size_t n) {
  if (field == 3) bounds_str(c, buf, n);
  else if (field == 2) snprintf(buf, n, "%s", c->schedule == ST_PIPELINE_GPIPE ? "gpipe" : "1f1b");
  else snprintf(buf, n, "%d", (int)(field == 0 ? c->stages : c->micro_batches));
}

/* The first field of b that differs from a's, or -1. */
static int differs(const pipe_config *a, const pipe_config *b) {
  if (a->stages != b->stages) return 0;
  if (a->micro_batches != b->micro_batches) return 1;
  if (a->schedule != b->schedule) return 2;
  for (int i = 0; i < a->stages - 1 && i < NB; i++)
    if (a->bounds[i] != b->bounds[i]) return 3;
  return -1;
}

st_status st__pipe_procs_agree(struct st_cluster *c, int stages, int micro_batches,
                               st_pipeline_schedule sched, const int *first_layer) {
  enum { NF = sizeof(pipe_config) / sizeof(float) };
  pipe_config mine;
  memset(&mine, 0, sizeof mine);
  mine.stages = stages, mine.micro_batches = micro_batches, mine.schedule = (int32_t)sched;
  for (int i = 1; i < stages && i < NB; i++) mine.bounds[i - 1] = first_layer[i];
  int P = st__cluster_size(c);
  float send[NF], all[ST_MAX_WORKERS * NF];
  memcpy(send, &mine, sizeof mine);
  st_status s = st__cluster_all_gather(c, send, NF, all);
  if (s != ST_OK) return st_error_prefix(s, "pipeline: comparing the processes' pipeline flags: ");
  pipe_config z, r;
  memcpy(&z, all, sizeof z);
  for (int k = 1; k < P; k++) {
    memcpy(&r, all + (size_t)k * NF, sizeof r);
    int f = differs(&z, &r);
    if (f < 0) continue;
    char va[512], vz[512], others[64] = "";
    value_str(&r, f, va, sizeof va);
    value_str(&z, f, vz, sizeof vz);
    int more = 0;
    for (int j = k + 1; j < P; j++) {
      pipe_config q;
      memcpy(&q, all + (size_t)j * NF, sizeof q);
      more += differs(&z, &q) >= 0;
    }
    if (more) snprintf(others, sizeof others, " (and %d more rank%s)", more, more > 1 ? "s" : "");
    return st_error(ST_ERR_INVALID, "pipeline: rank %d%s differs from rank 0 in %s: %s (rank 0: "
                    "%s); every process of a pipeline must be given the same pipeline flags",
                    k, others, g_flag[f], va, vz);
  }
  return ST_OK;
}

void st__pipe_batch_digest(const st_net *m, const st_batch *b, uint32_t out[2]) {
  size_t xs = st_shape_size(m->input_shape), outs = st__net_output_size(m);
  size_t ys = st_loss_is_sparse(m->loss) ? 1 : outs, n = b->size > 0 ? (size_t)b->size : 0;
  out[0] = b->x ? st_crc32c(0, b->x, n * xs * sizeof(float)) : 0;
  out[1] = b->y ? st_crc32c(0, b->y, n * ys * sizeof(float)) : 0;
}

st_status st__pipe_compare_digests(const float *all, int P, size_t stride, size_t at,
                                   int64_t step) {
  uint32_t z[2], r[2];
  memcpy(z, all + at, sizeof z);
  for (int k = 1; k < P; k++) {
    memcpy(r, all + (size_t)k * stride + at, sizeof r);
    if (r[0] == z[0] && r[1] == z[1]) continue;
    bool x = r[0] != z[0];
    return st_error(ST_ERR_INVALID, "pipeline: at step %lld rank %d read other %s than rank 0 "
                    "(CRC32C 0x%08x, rank 0: 0x%08x): the first stage feeds its examples and "
                    "the last stage scores its own labels, so every process of a pipeline must "
                    "read the same data in the same order (same --data, --shuffle-buffer, "
                    "--seed, --features, ...)",
                    (long long)step + 1, k, x ? "examples" : "labels", x ? r[0] : r[1],
                    x ? z[0] : z[1]);
  }
  return ST_OK;
}
