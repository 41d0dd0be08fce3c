/* Internal: one stage of the pipeline strategy (pipeline.c) — a contiguous
 * range of the net's layers with the buffers to run forward and backward of
 * its micro-batches — and the partition of a net's layers into stages.
 *
 * A stage holds only its own share: the variables of its layers (in one
 * process, the disjoint range [poff, poff+np) of the net's buffers, which
 * is also where checkpoints and --save read them), their gradient sum, and
 * per in-flight micro-batch ("slot") the activations and caches of its
 * layers. The gradient of the micro-batch's input (what the previous stage
 * needs) is written into the previous stage's recv[] buffers. */
#ifndef STRATA_DISTRIBUTE_PIPELINE_H
#define STRATA_DISTRIBUTE_PIPELINE_H

#include "distribute/strategy.h"

/* A table tied across stages: a layer's variables (GPT's token embedding,
 * wte) read again by a later stage's layer (st_layer.tied: the output head,
 * ReversibleEmbedding). The stage of the lookup (src: the table's only call
 * is its first node) keeps the table's values for its forward, but neither
 * its gradient nor its optimizer slots; the stage of the head (dst: the
 * table's owner) holds values, gradient and slots. Per micro-batch k, dst's
 * head writes its part of the gradient h_k into tsum (k = 0: tgrad), src
 * hands dst the gradient of the lookup's output (tdy: [n, dy]; a message
 * across processes) and dst runs the lookup's backward on it (e_k, on the
 * rows of the micro-batch's ids only: pipeline_tie.c), so that tgrad = sum
 * over k of (h_k + e_k), the sums one device's threads make (bit-identical
 * to one_device --threads M). dst applies the
 * optimizer to the table and (across processes) sends the new values to src
 * before src's next forward. Checkpoints and --save write the table once. */
typedef struct st_pipe_tie {
  int layer;            /* the table's layer; -1: no table crosses a cut */
  int node;             /* its call (the first node of stage src) */
  int src, dst;         /* stages */
  size_t off, n;        /* its trainable floats [off, off + n) */
  size_t dy;            /* floats per example of the lookup's output */
} st_pipe_tie;

/* The tie of a net cut at first[0..S) (first[S] = nlayers not needed):
 * out->layer = -1 when none crosses a cut; ST_ERR_INVALID naming the layers
 * when one does in a way the pipeline cannot run (the table's call must be
 * the first node of its stage, its variables the first of that stage's). */
st_status st__pipe_tie_find(const st_net *m, int S, const int *first, st_pipe_tie *out);

typedef struct st_pipe_stage {
  int index, lo, hi;       /* layers [lo, hi) */
  int nlo, nhi;            /* their nodes [nlo, nhi) (a chain: the same) */
  int in_tensor;           /* the one tensor read from before nlo (a node,
                              or the model input for the first stage) */
  st_backend_ctx *ctx;     /* owned: every kernel call of this stage */
  size_t poff, np;         /* trainable floats [poff, poff+np) of the net */
  size_t soff, ns;         /* non-trainable floats [soff, soff+ns) */
  int nslots;              /* micro-batches in flight at most */
  int cap;                 /* examples each slot's buffers hold */
  float *grads;            /* [np] sum over the micro-batches */
  float *dw;               /* one micro-batch's gradient of one layer (k > 0),
                              added to grads layer by layer: [largest layer] */
  float **acts;            /* [nslots * (nhi-nlo)]: [cap, out_k] */
  float **caches;          /* [nslots * (nhi-nlo)]: [cap * cache_per_example_k] */
  float **recv;            /* [nslots]: [cap, out of node nhi-1], the gradient
                              the next stage sends back; NULL on the last */
  float **in, **dxs;       /* across processes, stages after the first:
                              [nslots]: [cap, in_tensor], the input
                              received and the input gradient sent back */
  float *workspace;        /* max over its layers of workspace_floats(cap) */
  int n_gslots;            /* st__net_grad_slots of its nodes */
  float **gslots;          /* [n_gslots]: [cap * largest activation]; the
                              last stage's loss writes dy into gslots[0] */
  float *loss_rows;        /* [cap] (last stage) */
  st_pipe_tie tie;         /* the net's (layer -1: none) */
  bool tie_src, tie_dst;   /* this stage is the tie's src or dst */
  float **tdy;             /* src: [nslots]: [cap, tie.dy] */
  float *tgrad, *tsum;     /* dst: [tie.n] each */
  int *tmap;               /* dst: [rows of the table]: -1, or a row's compact index */
  int *trow;               /* dst: [cap * ids per example]: the rows of the compact table */
  float *tids, *tcompact;  /* dst: [cap * ids per example], [cap, tie.dy] (pipeline_tie.c) */
  int tcap;                /* examples they hold */
  float *tdyin;            /* dst across processes: [cap, tie.dy] received */
  size_t buffer_bytes;     /* bytes of the buffers above */
  double busy;             /* seconds in passes, over all steps */
} st_pipe_stage;

/* Layer where each stage starts: first[0] = 0 < first[1] < ... <
 * first[stages-1] < m->nlayers. bounds (stages-1 entries) as parsed, or -1
 * each: balanced so that the largest stage cost (FLOPs per example + parameter
 * bytes) is smallest. ST_ERR_INVALID naming the value otherwise. In a graph a
 * stage may start only where one tensor crosses from the stages before and
 * no layer's calls fall on both sides (st__net_cut). */
st_status st__pipe_partition(const st_net *m, int stages, const int *bounds, int *first);

/* The trainable (or non-trainable) floats of layers [lo, hi): [*off, *off + *n). */
void st__pipe_var_range(const st_net *m, int lo, int hi, bool trainable, size_t *off, size_t *n);
/* procs: the stage runs in a process of its own (in[] and dxs[] too). */
st_status st__pipe_stage_create(const st_net *m, int index, int lo, int hi, int nslots,
                                bool last, bool procs, const st_pipe_tie *tie,
                                st_pipe_stage **out);
void st__pipe_stage_destroy(const st_net *m, st_pipe_stage *st); /* accepts NULL */
/* Grow the slot buffers to hold cap examples each (no-op when they do). */
st_status st__pipe_stage_reserve(const st_net *m, st_pipe_stage *st, int cap);
/* What the stage holds once reserved for micro-batches of cap examples, in
 * bytes, counted without allocating (what buffer_bytes then says): *fixed its
 * variables, optimizer slots and gradients, *acts the slot buffers
 * (activations, caches, received gradients), gradient slots and workspace. */
void st__pipe_stage_plan_bytes(const st_net *m, const st_pipe_stage *st, int cap, size_t *fixed,
                               size_t *acts);
/* The pipeline strategy s attached to m training global batches of `batch`:
 * the stages of this process together (pipeline.c; across processes its one
 * stage, pipeline_procs.c), as st__pipe_stage_plan_bytes with the
 * micro-batch's examples as cap; *stages the stages counted, *cap that
 * micro-batch size. */
void st__pipeline_plan_bytes(const st_strategy *s, const st_net *m, int64_t batch,
                             uint64_t *fixed, uint64_t *acts, int *stages, int *cap);
void st__pipeline_procs_plan_bytes(const st_strategy *s, const st_net *m, int64_t batch,
                                   uint64_t *fixed, uint64_t *acts, int *cap);
/* The stage's output for the micro-batch in slot `slot`: [n, out of nhi-1]. */
static inline float *st__pipe_stage_out(const st_pipe_stage *st, int slot) {
  return st->acts[(size_t)slot * (size_t)(st->nhi - st->nlo) + (size_t)(st->nhi - st->nlo - 1)];
}
/* Floats per example of the stage's input and output. */
static inline size_t st__pipe_stage_in_size(const st_net *m, const st_pipe_stage *st) {
  return st_shape_size(st__net_tensor_shape(m, st->in_tensor));
}
static inline size_t st__pipe_stage_out_size(const st_net *m, const st_pipe_stage *st) {
  return st_shape_size(st__net_tensor_shape(m, st->nhi - 1));
}
/* Forward of micro-batch mb (n examples of x) through the stage's layers into
 * slot; the dropout stream is keyed by (step, layer, mb) as one device's
 * slice mb is. Returns the output. */
const float *st__pipe_stage_forward(const st_net *m, st_pipe_stage *st, int slot, int mb,
                                    const float *x, int n, bool training, int64_t step);
/* Backward of micro-batch mb (the dropout key) from dy [n, out] (clobbered;
 * gslots[0] for the last stage):
 * gradients of its variables into grads, or, when to_dw (every micro-batch
 * after the first), each layer's into dw then added to grads (elementwise:
 * the sums one device's threads make), and, when dx is
 * not NULL, the gradient of its input into dx. Layers before `first`
 * (the net's first layer with a trainable variable) are skipped. */
void st__pipe_stage_backward(const st_net *m, st_pipe_stage *st, int slot, int mb,
                             bool to_dw, const float *x, float *dy, int n, float *dx, int first,
                             int64_t step);

/* The tie's dst, once src ran backward k: the table's gradient of
 * micro-batch k (ids: its model input [n, ...], dy: the lookup output's
 * gradient [n, tie.dy], clobbered) added to the head's, and that sum to
 * tgrad (k > 0). ST_ERR_NOMEM (the compact table's layer). */
st_status st__pipe_tie_fold(const st_net *m, st_pipe_stage *st, int k, const float *ids,
                            float *dy, int n, int64_t step);
/* The tie's dst: the optimizer update of the table. */
void st__pipe_tie_apply(const st_net *m, st_pipe_stage *st);

/* Micro-batch k had no examples: zero gradients (k == 0) or zeros added. */
void st__pipe_stage_no_examples(const st_net *m, st_pipe_stage *st, int k);

/* pipeline_procs.c: the strategy across the processes of an MPI job (stage
 * = rank / replicas), used by pipeline.c when the strategy has a cluster. */
st_status st__pipeline_procs_attach(st_strategy *s, st_net *m);
void st__pipeline_procs_detach(st_strategy *s);
st_status st__pipeline_procs_train_step(st_strategy *s, st_net *m, const st_batch *b,
                                        st_step_stats *out);
st_status st__pipeline_procs_eval_step(st_strategy *s, st_net *m, const st_batch *b,
                                       st_step_stats *out, float *pred);
/* Where the variables live across processes (placement.h): each stage's
 * share in reserved address space, streamed to the chief for a save. */
extern const st_var_placement st__procs_placement;
/* Stage i's figures as its first replica reported them at the last step. */
st_status st__pipeline_procs_stats(const st_strategy *s, int i, st_pipeline_stage_stats *out);
/* pipeline_sched.c: replay the passes each stage ran (log[s*2M + i]: the
 * i-th pass of stage s, k+1 for forward k, -(k+1) for backward k) on a
 * logical clock of one unit per pass; idle[s] = 1 - 2M / makespan,
 * in_flight[s] = the most micro-batches stage s held at once. */
st_status st__pipe_replay(int S, int M, const int *log, double *idle, int *in_flight);
/* The net's first layer with a trainable variable (nlayers when none). */
int st__pipe_first_trainable(const st_net *m);

/* pipeline_clip.c: global_clipnorm, the norm formed in one device's order.
 * A run of trainable floats [off, off + n) whose gradient stage `stage`
 * holds. */
typedef struct st_pipe_seg {
  size_t off, n;
  int stage;
} st_pipe_seg;
/* The net's trainable floats as segments (seg: S + 1 entries) in offset
 * order, first[0..S] the stages' first layers (first[S] = nlayers);
 * returns their count, or -1 when they do not tile [0, n_params). */
int st__pipe_clip_segments(const st_net *m, int S, const int *first, const st_pipe_tie *tie,
                           st_pipe_seg *seg);
/* In one process, once every stage holds its gradients (before any
 * update): all of them scaled by the factor of their global norm.
 * ST_ERR_INVALID when the stages do not tile the variables. */
st_status st__pipe_clip_stages(const st_net *m, st_pipe_stage *const *stages, int S);
/* Across processes (P = S x D, rank = stage x D + rep): this process's
 * stage st, after its replicas' all-reduce; every process of the job calls
 * it at the same point of the step. The failed exchange is named. */
struct st_collective;
typedef struct st_pipe_clip_procs {
  st_pipe_stage *st;
  int S, D, rep;
  const int *first;          /* [S + 1] */
  struct st_collective *p2p; /* point-to-point */
} st_pipe_clip_procs;
st_status st__pipe_clip_across(const st_net *m, const st_pipe_clip_procs *c);

/* pipeline_agree.c: every process of c has the same stage count,
 * micro-batches, schedule and stage boundaries (first_layer[1..stages-1]);
 * ST_ERR_INVALID on every process otherwise, naming the flag, the ranks and
 * both values. Every process, before any message is sized. */
struct st_cluster;
st_status st__pipe_procs_agree(struct st_cluster *c, int stages, int micro_batches,
                               st_pipeline_schedule sched, const int *first_layer);
/* out: CRC32C of the batch's examples and of its labels (0 when absent). */
void st__pipe_batch_digest(const st_net *m, const st_batch *b, uint32_t out[2]);
/* all: P records of `stride` floats, each with a digest at float `at`:
 * ST_ERR_INVALID naming the first rank whose digest differs from rank 0's. */
st_status st__pipe_compare_digests(const float *all, int P, size_t stride, size_t at,
                                   int64_t step);

#endif
