/* Internal: the fast CPU kernels, split over cpu.c (memory, BLAS-like, bias,
 * activations, the table), cpu_conv.c (im2col/col2im, pooling) and cpu_train.c
 * (batchnorm, dropout, losses, optimizer updates). Signatures are those of the
 * st_backend slots (backend/impl.h); the same thread rules apply (any thread,
 * disjoint buffers; a cpu context is read-only after creation). */
#ifndef STRATA_SRC_BACKEND_CPU_H
#define STRATA_SRC_BACKEND_CPU_H

#include <stdatomic.h>

#include "backend/impl.h"

/* The cpu*.c kernels are compiled at -O3 when optimising: GCC's -O2 uses the
 * "very-cheap" vectoriser cost model, which vectorises no loop whose trip count
 * is unknown, i.e. none of these. Must precede the function definitions. (Loops
 * calling sqrtf/expf stay scalar: that needs -fno-math-errno on the command
 * line: CMakeLists.txt passes it.) */
#if defined(__OPTIMIZE__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

/* The hot elementwise loops (optimizer updates, axpy, bias, ReLU) are built
 * three times, for AVX-512, AVX2 and the x86-64 baseline, and the loader picks
 * the widest the CPU has (GCC function multiversioning): the baseline's 4-lane
 * SSE made Adam ~12% of an mlp step. CMakeLists.txt passes -ffp-contract=off,
 * so no clone fuses a multiply-add: every clone gives the baseline's bits.
 * Not under the sanitizers: their runtimes are not up yet when the loader
 * runs the clones' resolvers (TSan crashes there). */
#if defined(__OPTIMIZE__) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define ST__SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define ST__SIMD_CLONES
#endif

/* The kernel threads' fork-join pool (cpu_pool.c): `workers` threads plus
 * the caller's. A run returns when its ntasks tasks are done; it does not
 * wait for workers that have not started (a loaded machine). Owner thread
 * only, one run at a time. */
typedef struct st__cpu_pool st__cpu_pool;
st_status st__cpu_pool_create(int workers, st__cpu_pool **out);
void st__cpu_pool_destroy(st__cpu_pool *p); /* accepts NULL; joins the workers */
int st__cpu_pool_workers(const st__cpu_pool *p);
void st__cpu_pool_run(st__cpu_pool *p, int ntasks, void (*fn)(void *arg, int task), void *arg);

/* A cpu context's own state (st_backend_ctx.impl), set at its creation (the
 * pool also by ctx_set_threads, on the owner's thread between kernel calls). */
typedef struct st__cpu_state {
  /* Run the kernels dispatched by hand (2x2 max pooling) in their baseline
   * build even where the CPU has AVX-512 (tests set it). */
  bool baseline_kernels;
  /* threads-1 workers for the kernels that split their work (direct
   * convolution, batch normalization, elementwise passes), or NULL: every
   * kernel on the calling thread. */
  st__cpu_pool *pool;
  atomic_flag busy; /* set while a kernel runs its tasks on the pool */
} st__cpu_state;

/* Runs fn(arg, t) for t in [0, ntasks), on the context's pool and the
 * calling thread (with flush-to-zero for the duration, as the pool's threads
 * have it), or all on the calling thread when the context has no pool or its
 * pool is busy (another thread sharing the context, or a nested call). The
 * kernels that use it split their work so that every output is computed by
 * one task in a fixed order: the same bytes for any thread count. */
void st__cpu_parallel(st_backend_ctx *ctx, int ntasks, void (*fn)(void *arg, int task),
                      void *arg);
/* Threads st__cpu_parallel may use on ctx (1 without a pool). */
int st__cpu_threads(const st_backend_ctx *ctx);

/* Channels processed per chunk by kernels that keep per-channel state on the
 * stack (pooling argmax, batchnorm sums). */
#define ST__CPU_CHUNK 256

void st__cpu_im2col(st_backend_ctx *ctx, const st_conv_geom *g, const float *x, float *col);
void st__cpu_col2im(st_backend_ctx *ctx, const st_conv_geom *g, const float *col, float *dx);
/* True when this build has the direct convolution's AVX-512 kernels (not
 * under ThreadSanitizer) and the CPU runs them: the conv_direct slots then
 * take the geometries they handle. */
bool st__cpu_conv_direct_built(void);
bool st__cpu_conv_direct_forward(st_backend_ctx *ctx, const st_conv_geom *g, int n, int f,
                                 const float *x, const float *w, float *y, float *ws);
bool st__cpu_conv_direct_dw(st_backend_ctx *ctx, const st_conv_geom *g, int n, int f,
                            const float *x, const float *dy, bool accumulate, float *dw,
                            float *ws);
bool st__cpu_conv_direct_dx(st_backend_ctx *ctx, const st_conv_geom *g, int n, int f,
                            const float *dy, const float *w, float *dx, float *ws);
void st__cpu_maxpool_forward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x, float *y);
void st__cpu_maxpool_backward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                              const float *y, const float *dy, float *dx);
void st__cpu_avgpool_forward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x, float *y);
void st__cpu_avgpool_backward(st_backend_ctx *ctx, const st_pool_geom *g, const float *dy,
                              float *dx);

void st__cpu_bn_train(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                      const float *beta, float eps, float *mean, float *invstd,
                      float *y);
void st__cpu_bn_infer(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                      const float *beta, const float *moving_mean,
                      const float *moving_var, float eps, float *y);
void st__cpu_bn_backward(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                         const float *mean, const float *invstd,
                         const float *dy, float *dx, float *dgamma,
                         float *dbeta);
void st__cpu_dropout_forward(st_backend_ctx *ctx, size_t n, float rate, uint64_t seed,
                             uint64_t stream, const float *x, float *y);
void st__cpu_dropout_backward(st_backend_ctx *ctx, size_t n, float rate, uint64_t seed,
                              uint64_t stream, const float *dy, float *dx);
void st__cpu_loss(st_backend_ctx *ctx, st_loss_kind kind, int rows, int cols, const float *pred,
                  const float *y, float scale, float *loss, float *dpred);
/* Classes from which a row of sparse softmax cross-entropy takes the
 * vectorised path (cpu_loss_wide.c): loss of one row of logits z[cols] with a
 * valid label, d[cols] = scale * (softmax - onehot) unless d is NULL. */
#define ST__CPU_WIDE_ROW 4096
float st__cpu_sparse_ce_wide_row(int cols, const float *z, int label, float scale, float *d);
void st__cpu_sgd(st_backend_ctx *ctx, size_t n, float lr, float momentum, bool nesterov, float *p,
                 const float *g, float *v);
void st__cpu_adam(st_backend_ctx *ctx, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t t, float *p, const float *g,
                  float *m, float *v);
void st__cpu_rmsprop(st_backend_ctx *ctx, size_t n, float lr, float rho, float momentum, float eps,
                     float *p, const float *g, float *ms, float *mom);

/* GELU (exact) forward y = x Phi(x) and backward dx = dy (Phi(x) + x phi(x))
 * over n floats, vectorisable (cpu_gelu.c; within a few float roundings of
 * the reference's double erf). y == x and dx == dy allowed. */
void st__cpu_gelu_forward(size_t n, const float *x, float *y);
void st__cpu_gelu_backward(size_t n, const float *x, const float *dy, float *dx);

#endif
