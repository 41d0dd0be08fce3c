/* Internal: the backend table (one per device kind) and the per-device context
 * its slots take first. nn/ and distribute/ call kernels only through this
 * table, so a CUDA backend is one more table. Every kernel has a plain C
 * reference version (st_backend_reference()); tests/test_kernels.c runs every
 * kernel of every built backend against it.
 *
 * Layouts: row-major; images NHWC (Keras's channels_last); all float32.
 * Pointers are device pointers of the backend (host pointers for cpu/reference).
 *
 * Context: whoever runs kernels owns an st_backend_ctx (st_backend_ctx_create,
 * public: strata/backend.h): each replica one (src/nn/replica.c), the net one
 * (st_net.be_ctx, src/nn/net.h) for host-side work on its own variables
 * (compile, checkpoints, central storage's update). A context holds what a
 * device needs per user of it: for CUDA a stream, a cuBLASLt
 * handle and a workspace; for cpu the kernel choices; for reference nothing.
 * A context is not locked: its owner says which threads use it. Different
 * contexts may be used by different threads at once on disjoint buffers. The
 * cpu and reference contexts are read-only after creation, so several threads
 * may also share one on disjoint buffers (central storage's chunked update does).
 *
 * Optional slots may be NULL; callers go through the st__be_* helpers below,
 * which apply the stated fallback. The required slots follow `alloc`.
 *
 * Adding a kernel touches seven files (the static_assert on
 * ST__BACKEND_SLOTS in each backend file fails the build until 2-4 are done):
 *  1. the slot here (after `alloc`; or before it, optional, with an st__be_*
 *     fallback helper at the end of this header);
 *  2. src/backend/reference.c: the plain C version (the ground truth);
 *  3. src/backend/cpu*.c: the fast version (or the reference's, named so);
 *  4. src/backend/cuda/module.c: the table entry, and the device kernel in
 *     src/backend/cuda/kernels.cu or train.cu (tests/cuda_emu/ compiles those
 *     files as host code, so test_cuda_backend checks it without a GPU);
 *  5. tests/test_kernels.c: a case comparing every built backend with the
 *     reference (and NaN/edge cases);
 *  6. the caller in src/nn/ or src/distribute/ that uses the slot. */
#ifndef STRATA_SRC_BACKEND_IMPL_H
#define STRATA_SRC_BACKEND_IMPL_H

#include <string.h>

#include "strata/backend.h"

/* Convolution geometry for one image, NHWC. pad_* are the zero-padding rows/cols
 * added before the first row/col ('same' padding as TensorFlow computes it). */
typedef struct st_conv_geom {
  int h, w, c;        /* input */
  int kh, kw;         /* kernel */
  int sh, sw;         /* strides */
  int pad_top, pad_left;
  int oh, ow;         /* output spatial size */
} st_conv_geom;

/* Pooling geometry for a batch, NHWC; 'valid' or 'same' via pads as above. For
 * 'same' average pooling, padded cells are excluded from the mean (as Keras). */
typedef struct st_pool_geom {
  int n, h, w, c;
  int ph, pw;   /* pool size */
  int sh, sw;   /* strides */
  int pad_top, pad_left;
  int oh, ow;
  /* maxpool_backward only: x is the output of a ReLU and dx also carries
   * ReLU's derivative (a gradient reaches a max only if it is > 0), so the
   * layer before skips its own pass over the activation. */
  bool relu_input;
} st_pool_geom;

struct st_backend_ctx {
  const st_backend *be; /* the table this context belongs to */
  int device_index;     /* N of cpu:N / gpu:N (the replica index on cpu) */
  int threads;          /* kernel threads this context may use; 0 = backend default */
  void *impl;           /* the backend's own state (ctx_create); may be NULL */
};

struct st_backend {
  const char *name; /* "reference", "cpu", "cuda" */

  /* ---- context (optional) ---- */
  /* optional: NULL falls back to a context with no private state (impl NULL).
   * Creates the backend's own state for one user of device `device_index`. */
  st_status (*ctx_create)(int device_index, int threads, void **impl);
  /* optional: NULL = nothing to free. Receives what ctx_create made. */
  void (*ctx_destroy)(void *impl);
  /* optional: NULL = the context's kernels keep the threads they have. Lets
   * them use up to `threads` threads, the caller's included (cpu: a pool of
   * threads - 1 workers; 0 or 1: none). The owner's thread, between kernel
   * calls. Through st__be_set_threads (which also sets ctx->threads). */
  st_status (*ctx_set_threads)(st_backend_ctx *ctx, int threads);

  /* ---- memory transfers (optional) ---- */
  /* optional: NULL falls back to memcpy (host-memory backends). */
  void (*to_device)(st_backend_ctx *ctx, void *dst, const void *host_src,
                    size_t bytes);
  /* optional: NULL falls back to memcpy (host-memory backends). */
  void (*to_host)(st_backend_ctx *ctx, void *host_dst, const void *src,
                  size_t bytes);
  /* optional: NULL = kernels run synchronously, nothing to wait for. */
  void (*synchronize)(st_backend_ctx *ctx);
  /* optional: NULL falls back to memmove. dst and src are this backend's
   * memory (any of its contexts' on the same device); ordered on ctx. */
  void (*copy)(st_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
  /* optional: NULL falls back to im2col / col2im image by image (the same
   * values). n images: x [n, h, w, c] -> col [n * oh * ow, kh*kw*c], and the
   * adjoint dx [n, h, w, c] += scatter of col. One launch on a GPU. */
  void (*im2col_n)(st_backend_ctx *ctx, const struct st_conv_geom *g, int n, const float *x,
                   float *col);
  void (*col2im_n)(st_backend_ctx *ctx, const struct st_conv_geom *g, int n, const float *col,
                   float *dx);
  /* optional: NULL (or a false return: geometry not handled) = the caller
   * lowers to im2col + gemm. Direct convolution without an im2col buffer, for
   * callers whose summation order may differ from the gemm's (Conv2D without
   * bias: the cnn's convolutions keep the gemm's bytes). ws: at least
   * st__conv_direct_ws_floats(g, n, f) floats of this backend's memory.
   *   forward: y[n*oh*ow, f] = conv(x[n,h,w,c], w[kh,kw,c,f]) (overwrites)
   *   dw:      dw[kh*kw*c, f] (+)= sum over the n images' output cells of
   *            patch(x) (x) dy[n*oh*ow, f]; accumulate: add to dw
   *   dx:      dx[n,h,w,c] = the input gradient of forward (overwrites) */
  bool (*conv_direct_forward)(st_backend_ctx *ctx, const struct st_conv_geom *g, int n, int f,
                              const float *x, const float *w, float *y, float *ws);
  bool (*conv_direct_dw)(st_backend_ctx *ctx, const struct st_conv_geom *g, int n, int f,
                         const float *x, const float *dy, bool accumulate, float *dw,
                         float *ws);
  bool (*conv_direct_dx)(st_backend_ctx *ctx, const struct st_conv_geom *g, int n, int f,
                         const float *dy, const float *w, float *dx, float *ws);
  /* optional: NULL = its slots cannot fail. The first failure a slot of this
   * context met since it was created (a device error: the call and the
   * device named), as st_error sets it; ST_OK when none. Synchronizes. */
  st_status (*status)(st_backend_ctx *ctx);

  /* ---- memory (required from here on) ---- */
  void *(*alloc)(st_backend_ctx *ctx, size_t bytes); /* NULL + ST_ERR_NOMEM on failure */
  void (*free)(st_backend_ctx *ctx, void *p);        /* accepts NULL */

  /* ---- BLAS-like ---- */
  /* C[m,n] = alpha * op(A) op(B) + beta * C; op(A) is [m,k], op(B) is [k,n]. */
  void (*gemm)(st_backend_ctx *ctx, bool trans_a, bool trans_b, int m, int n,
               int k, float alpha, const float *a, int lda, const float *b,
               int ldb, float beta, float *c, int ldc);
  void (*axpy)(st_backend_ctx *ctx, size_t n, float alpha, const float *x,
               float *y);                                     /* y += a*x */
  void (*scale)(st_backend_ctx *ctx, size_t n, float alpha, float *x); /* x *= a */
  void (*fill)(st_backend_ctx *ctx, size_t n, float value, float *x);

  /* ---- bias and activations ---- */
  void (*bias_add)(st_backend_ctx *ctx, int rows, int cols,
                   const float *bias /*[cols]*/, float *y /*[rows,cols]*/);
  /* db[cols] = sum over rows of dy (overwrites db). */
  void (*bias_grad)(st_backend_ctx *ctx, int rows, int cols, const float *dy,
                    float *db);
  /* y = act(x); x == y allowed. */
  void (*act_forward)(st_backend_ctx *ctx, st_activation act, int rows,
                      int cols, const float *x, float *y);
  /* dx = dy * act'(.); x may be NULL unless st_activation_needs_input(act);
   * dx == dy allowed. */
  void (*act_backward)(st_backend_ctx *ctx, st_activation act, int rows,
                       int cols, const float *x, const float *y,
                       const float *dy, float *dx);

  /* ---- convolution helpers (one image) ---- */
  /* col[oh*ow, kh*kw*c] from x[h,w,c] (column order: kh, kw, c — so that the
   * Keras kernel [kh,kw,c,oc] reshaped to [kh*kw*c, oc] multiplies it). */
  void (*im2col)(st_backend_ctx *ctx, const st_conv_geom *g, const float *x,
                 float *col);
  /* dx[h,w,c] += scatter of col[oh*ow, kh*kw*c] (the adjoint of im2col). */
  void (*col2im)(st_backend_ctx *ctx, const st_conv_geom *g, const float *col,
                 float *dx);

  /* ---- pooling (batch) ---- */
  void (*maxpool_forward)(st_backend_ctx *ctx, const st_pool_geom *g,
                          const float *x, float *y);
  /* dx (overwritten) routes each dy to the first max of its window (a NaN
   * is the max of any window holding one: NaN propagates, as in TF). */
  void (*maxpool_backward)(st_backend_ctx *ctx, const st_pool_geom *g,
                           const float *x, const float *y, const float *dy,
                           float *dx);
  void (*avgpool_forward)(st_backend_ctx *ctx, const st_pool_geom *g,
                          const float *x, float *y);
  void (*avgpool_backward)(st_backend_ctx *ctx, const st_pool_geom *g,
                           const float *dy, float *dx);

  /* ---- batch normalization over rows of x[rows, c] ---- */
  /* Training: batch mean/variance (biased), writes mean[c], invstd[c]
   * (1/sqrt(var+eps)) and y. */
  void (*batchnorm_forward_train)(st_backend_ctx *ctx, int rows, int c,
                                  const float *x, const float *gamma,
                                  const float *beta, float eps, float *mean,
                                  float *invstd, float *y);
  void (*batchnorm_forward_infer)(st_backend_ctx *ctx, int rows, int c,
                                  const float *x, const float *gamma,
                                  const float *beta, const float *moving_mean,
                                  const float *moving_var, float eps, float *y);
  /* dx, dgamma, dbeta overwritten. */
  void (*batchnorm_backward)(st_backend_ctx *ctx, int rows, int c,
                             const float *x, const float *gamma,
                             const float *mean, const float *invstd,
                             const float *dy, float *dx, float *dgamma,
                             float *dbeta);

  /* ---- dropout: element i is kept iff unit(philox(seed, stream, i/4)[i%4])
   * >= rate; kept elements are scaled by 1/(1-rate). Same mask in backward. */
  void (*dropout_forward)(st_backend_ctx *ctx, size_t n, float rate,
                          uint64_t seed, uint64_t stream, const float *x,
                          float *y);
  void (*dropout_backward)(st_backend_ctx *ctx, size_t n, float rate,
                           uint64_t seed, uint64_t stream, const float *dy,
                           float *dx);

  /* ---- losses: pred[rows, cols] (logits or probabilities per kind), y is
   * [rows] class indices for sparse kinds, else [rows, cols]. Writes
   * loss[rows] (per-example loss, unscaled) and dpred = scale * d(loss)/d(pred)
   * (scale is 1/global_batch); dpred may be NULL. Probabilities are clipped to
   * [1e-7, 1-1e-7] as Keras does. */
  void (*loss)(st_backend_ctx *ctx, st_loss_kind kind, int rows, int cols,
               const float *pred, const float *y, float scale, float *loss,
               float *dpred);

  /* ---- optimizer updates over flat buffers of n floats ---- */
  /* v = momentum*v - lr*g; p += v (nesterov: p += momentum*v - lr*g). Keras form. */
  void (*sgd_update)(st_backend_ctx *ctx, size_t n, float lr, float momentum,
                     bool nesterov, float *p, const float *g, float *v);
  /* Adam (Keras form, bias-corrected lr, eps added to sqrt(v_hat)); t = step
   * number starting at 1; weight_decay > 0 gives AdamW (p -= lr*wd*p first). */
  void (*adam_update)(st_backend_ctx *ctx, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, int64_t t,
                      float *p, const float *g, float *m, float *v);
  /* RMSprop (Keras/TF form): ms = rho*ms + (1-rho) g^2;
   * mom = momentum*mom + lr*g/sqrt(ms+eps); p -= mom (mom unused if 0). */
  void (*rmsprop_update)(st_backend_ctx *ctx, size_t n, float lr, float rho,
                         float momentum, float eps, float *p, const float *g,
                         float *ms, float *mom);
};

/* The plain C reference table (always built). Any thread. */
const st_backend *st_backend_reference(void);
/* The fast CPU table (OpenBLAS sgemm, vectorised loops). Any thread. */
const st_backend *st_backend_cpu(void);

/* Completeness check every backend table runs. From `alloc` on, st_backend
 * holds only required function pointers, so that part can be read as an array
 * of them: ST__BACKEND_SLOTS is their count (a backend file static_asserts its
 * own count against it, so adding a slot fails the build until each backend
 * fills it), and st__backend_table_complete() checks at first use that no
 * required slot was left NULL (each slot read with memcpy: no pointer is
 * type-punned). */
typedef void (*st__any_fn)(void);
#define ST__BACKEND_SLOTS \
  ((sizeof(st_backend) - offsetof(st_backend, alloc)) / sizeof(st__any_fn))
bool st__backend_table_complete(const st_backend *be);

/* The optional slots with their fallbacks applied. Same threads as the
 * context. */
static inline void st__be_to_device(st_backend_ctx *ctx, void *dst,
                                    const void *host_src, size_t bytes) {
  if (ctx->be->to_device)
    ctx->be->to_device(ctx, dst, host_src, bytes);
  else if (bytes && dst != host_src)
    memcpy(dst, host_src, bytes);
}
static inline void st__be_to_host(st_backend_ctx *ctx, void *host_dst,
                                  const void *src, size_t bytes) {
  if (ctx->be->to_host)
    ctx->be->to_host(ctx, host_dst, src, bytes);
  else if (bytes && host_dst != src)
    memcpy(host_dst, src, bytes);
}
static inline st_status st__be_set_threads(st_backend_ctx *ctx, int threads) {
  st_status s = ctx->be->ctx_set_threads ? ctx->be->ctx_set_threads(ctx, threads) : ST_OK;
  if (s == ST_OK) ctx->threads = threads;
  return s;
}
static inline void st__be_synchronize(st_backend_ctx *ctx) {
  if (ctx->be->synchronize) ctx->be->synchronize(ctx);
}
static inline void st__be_copy(st_backend_ctx *ctx, void *dst, const void *src, size_t bytes) {
  if (ctx->be->copy)
    ctx->be->copy(ctx, dst, src, bytes);
  else if (bytes && dst != src)
    memmove(dst, src, bytes);
}
static inline st_status st__be_status(st_backend_ctx *ctx) {
  return ctx->be->status ? ctx->be->status(ctx) : ST_OK;
}
static inline void st__be_im2col_n(st_backend_ctx *ctx, const st_conv_geom *g, int n,
                                   const float *x, float *col) {
  size_t xs = (size_t)g->h * g->w * g->c, cs = (size_t)g->oh * g->ow * g->kh * g->kw * g->c;
  if (ctx->be->im2col_n)
    ctx->be->im2col_n(ctx, g, n, x, col);
  else
    for (int i = 0; i < n; i++) ctx->be->im2col(ctx, g, x + (size_t)i * xs, col + (size_t)i * cs);
}
static inline void st__be_col2im_n(st_backend_ctx *ctx, const st_conv_geom *g, int n,
                                   const float *col, float *dx) {
  size_t xs = (size_t)g->h * g->w * g->c, cs = (size_t)g->oh * g->ow * g->kh * g->kw * g->c;
  if (ctx->be->col2im_n)
    ctx->be->col2im_n(ctx, g, n, col, dx);
  else
    for (int i = 0; i < n; i++) ctx->be->col2im(ctx, g, col + (size_t)i * cs, dx + (size_t)i * xs);
}
/* The direct convolution's padded input: rows x cols of one image holding
 * every cell a kernel window reads (the image at (pad_top, pad_left), zeros
 * around it). */
static inline int st__conv_padded_rows(const st_conv_geom *g) {
  int need = (g->oh - 1) * g->sh + g->kh, have = g->pad_top + g->h;
  return g->oh > 0 && need > have ? need : have;
}
static inline int st__conv_padded_cols(const st_conv_geom *g) {
  int need = (g->ow - 1) * g->sw + g->kw, have = g->pad_left + g->w;
  return g->ow > 0 && need > have ? need : have;
}
/* The input gradient of a stride-1 convolution as a convolution of dy
 * (channels f) with the flipped kernel. */
static inline st_conv_geom st__conv_transposed_geom(const st_conv_geom *g, int f) {
  return (st_conv_geom){.h = g->oh, .w = g->ow, .c = f, .kh = g->kh, .kw = g->kw, .sh = 1,
                        .sw = 1, .pad_top = g->kh - 1 - g->pad_top,
                        .pad_left = g->kw - 1 - g->pad_left, .oh = g->h, .ow = g->w};
}
/* Workspace floats of the conv_direct_* slots for n images, f filters. */
static inline size_t st__conv_direct_ws_floats(const st_conv_geom *g, int n, int f) {
  size_t fwd = (size_t)n * st__conv_padded_rows(g) * st__conv_padded_cols(g) * g->c;
  st_conv_geom t = st__conv_transposed_geom(g, f);
  size_t dx = (size_t)n * st__conv_padded_rows(&t) * st__conv_padded_cols(&t) * f +
              (size_t)g->kh * g->kw * g->c * f;
  return (fwd > dx ? fwd : dx) + 32;
}
static inline bool st__be_conv_direct_forward(st_backend_ctx *ctx, const st_conv_geom *g, int n,
                                              int f, const float *x, const float *w, float *y,
                                              float *ws) {
  return ctx->be->conv_direct_forward && ctx->be->conv_direct_forward(ctx, g, n, f, x, w, y, ws);
}
static inline bool st__be_conv_direct_dw(st_backend_ctx *ctx, const st_conv_geom *g, int n, int f,
                                         const float *x, const float *dy, bool accumulate,
                                         float *dw, float *ws) {
  return ctx->be->conv_direct_dw && ctx->be->conv_direct_dw(ctx, g, n, f, x, dy, accumulate, dw, ws);
}
static inline bool st__be_conv_direct_dx(st_backend_ctx *ctx, const st_conv_geom *g, int n, int f,
                                         const float *dy, const float *w, float *dx, float *ws) {
  return ctx->be->conv_direct_dx && ctx->be->conv_direct_dx(ctx, g, n, f, dy, w, dx, ws);
}

/* True when the backend's buffers are host memory (no transfer slots):
 * the host may read and write them directly. */
static inline bool st__be_is_host(const st_backend *be) { return be->to_device == NULL; }

#endif
