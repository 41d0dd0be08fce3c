/* Strata backend layer: one table of function pointers per device kind.
 * nn/ and distribute/ call kernels only through this table, so a CUDA backend is
 * one more table. Every kernel has a plain C reference version
 * (st_backend_reference()); tests/test_kernels.c runs every kernel of every built
 * backend against it.
 *
 * Layouts: row-major; images NHWC (Keras's channels_last); all float32.
 * Pointers are device pointers of the backend (host pointers for cpu/reference).
 * Kernels are called from one thread per replica; a backend must allow different
 * threads to call it at once on disjoint buffers.
 *
 * Adding a kernel: add the slot here, write it in src/backend/reference.c, the fast
 * version in src/backend/cpu*.c, and a case in tests/test_kernels.c. The
 * static_assert in each backend file checks the table is filled. */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include "strata/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_activation {
  ST_ACT_LINEAR = 0,
  ST_ACT_RELU,
  ST_ACT_SIGMOID,
  ST_ACT_TANH,
  ST_ACT_SOFTMAX, /* over the last dimension (cols) */
  ST_ACT_ELU,     /* alpha = 1 */
  ST_ACT_GELU,    /* exact (erf) form, Keras default approximate=False */
  ST_ACT_COUNT
} st_activation;
const char *st_activation_name(st_activation a);          /* "relu" */
st_status st_activation_parse(const char *name, st_activation *out);
/* True when act_backward needs the pre-activation x (else y suffices). */
bool st_activation_needs_input(st_activation a);

/* Loss kinds. For the sparse losses a label is a class index stored as a float. */
typedef enum st_loss_kind {
  ST_LOSS_SPARSE_CE_LOGITS = 0, /* sparse categorical CE, from_logits=True */
  ST_LOSS_SPARSE_CE,            /* sparse categorical CE on probabilities */
  ST_LOSS_CE,                   /* categorical CE on probabilities, one-hot y */
  ST_LOSS_CE_LOGITS,            /* categorical CE from logits, one-hot y */
  ST_LOSS_BCE,                  /* binary CE on probabilities */
  ST_LOSS_BCE_LOGITS,           /* binary CE from logits */
  ST_LOSS_MSE,                  /* mean squared error (mean over cols) */
  ST_LOSS_COUNT
} st_loss_kind;
const char *st_loss_name(st_loss_kind k);
st_status st_loss_parse(const char *name, st_loss_kind *out);
bool st_loss_is_sparse(st_loss_kind k); /* labels are [rows] class indices */

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

typedef struct st_backend {
  const char *name; /* "reference", "cpu", "cuda" */

  /* ---- memory ---- */
  void *(*alloc)(size_t bytes);  /* NULL + ST_ERR_NOMEM on failure */
  void (*free)(void *p);
  void (*to_device)(void *dst, const void *host_src, size_t bytes);
  void (*to_host)(void *host_dst, const void *src, size_t bytes);
  void (*synchronize)(void);

  /* ---- BLAS-like ---- */
  /* C[m,n] = alpha * op(A) op(B) + beta * C; op(A) is [m,k], op(B) is [k,n]. */
  void (*gemm)(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb, float beta,
               float *c, int ldc);
  void (*axpy)(size_t n, float alpha, const float *x, float *y); /* y += a*x */
  void (*scale)(size_t n, float alpha, float *x);                /* x *= a */
  void (*fill)(size_t n, float value, float *x);

  /* ---- bias and activations ---- */
  void (*bias_add)(int rows, int cols, const float *bias /*[cols]*/,
                   float *y /*[rows,cols]*/);
  /* db[cols] = sum over rows of dy (overwrites db). */
  void (*bias_grad)(int rows, int cols, const float *dy, float *db);
  /* y = act(x); x == y allowed. */
  void (*act_forward)(st_activation act, int rows, int cols, const float *x,
                      float *y);
  /* dx = dy * act'(.); x may be NULL unless st_activation_needs_input(act);
   * dx == dy allowed. */
  void (*act_backward)(st_activation act, int rows, int cols, const float *x,
                       const float *y, const float *dy, float *dx);

  /* ---- convolution helpers (one image) ---- */
  /* col[oh*ow, kh*kw*c] from x[h,w,c] (column order: kh, kw, c — so that the
   * Keras kernel [kh,kw,c,oc] reshaped to [kh*kw*c, oc] multiplies it). */
  void (*im2col)(const st_conv_geom *g, const float *x, float *col);
  /* dx[h,w,c] += scatter of col[oh*ow, kh*kw*c] (the adjoint of im2col). */
  void (*col2im)(const st_conv_geom *g, const float *col, float *dx);

  /* ---- pooling (batch) ---- */
  void (*maxpool_forward)(const st_pool_geom *g, const float *x, float *y);
  /* dx (overwritten) routes each dy to the first max of its window (a NaN
   * is the max of any window holding one: NaN propagates, as in TF). */
  void (*maxpool_backward)(const st_pool_geom *g, const float *x,
                           const float *y, const float *dy, float *dx);
  void (*avgpool_forward)(const st_pool_geom *g, const float *x, float *y);
  void (*avgpool_backward)(const st_pool_geom *g, const float *dy, float *dx);

  /* ---- batch normalization over rows of x[rows, c] ---- */
  /* Training: batch mean/variance (biased), writes mean[c], invstd[c]
   * (1/sqrt(var+eps)) and y. */
  void (*batchnorm_forward_train)(int rows, int c, const float *x,
                                  const float *gamma, const float *beta,
                                  float eps, float *mean, float *invstd,
                                  float *y);
  void (*batchnorm_forward_infer)(int rows, int c, const float *x,
                                  const float *gamma, const float *beta,
                                  const float *moving_mean,
                                  const float *moving_var, float eps, float *y);
  /* dx, dgamma, dbeta overwritten. */
  void (*batchnorm_backward)(int rows, int c, const float *x,
                             const float *gamma, const float *mean,
                             const float *invstd, const float *dy, float *dx,
                             float *dgamma, float *dbeta);

  /* ---- dropout: element i is kept iff unit(philox(seed, stream, i/4)[i%4])
   * >= rate; kept elements are scaled by 1/(1-rate). Same mask in backward. */
  void (*dropout_forward)(size_t n, float rate, uint64_t seed, uint64_t stream,
                          const float *x, float *y);
  void (*dropout_backward)(size_t n, float rate, uint64_t seed,
                           uint64_t stream, const float *dy, float *dx);

  /* ---- losses: pred[rows, cols] (logits or probabilities per kind), y is
   * [rows] class indices for sparse kinds, else [rows, cols]. Writes
   * loss[rows] (per-example loss, unscaled) and dpred = scale * d(loss)/d(pred)
   * (scale is 1/global_batch); dpred may be NULL. Probabilities are clipped to
   * [1e-7, 1-1e-7] as Keras does. */
  void (*loss)(st_loss_kind kind, int rows, int cols, const float *pred,
               const float *y, float scale, float *loss, float *dpred);

  /* ---- optimizer updates over flat buffers of n floats ---- */
  /* v = momentum*v - lr*g; p += v (nesterov: p += momentum*v - lr*g). Keras form. */
  void (*sgd_update)(size_t n, float lr, float momentum, bool nesterov,
                     float *p, const float *g, float *v);
  /* Adam (Keras form, bias-corrected lr, eps added to sqrt(v_hat)); t = step
   * number starting at 1; weight_decay > 0 gives AdamW (p -= lr*wd*p first). */
  void (*adam_update)(size_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, int64_t t, float *p, const float *g,
                      float *m, float *v);
  /* RMSprop (Keras/TF form): ms = rho*ms + (1-rho) g^2;
   * mom = momentum*mom + lr*g/sqrt(ms+eps); p -= mom (mom unused if 0). */
  void (*rmsprop_update)(size_t n, float lr, float rho, float momentum,
                         float eps, float *p, const float *g, float *ms,
                         float *mom);
} st_backend;

/* The plain C reference table (always built). */
const st_backend *st_backend_reference(void);
/* The fast CPU table (OpenBLAS sgemm, vectorised loops). */
const st_backend *st_backend_cpu(void);
/* Backend by name ("cpu", "reference", "cuda"); ST_ERR_NOT_BUILT if absent. */
st_status st_backend_get(const char *name, const st_backend **out);

/* Configure the BLAS library before first use: pick the right OpenBLAS core on
 * machines where its detection falls back to a generic one, and set its thread
 * count (0 = leave as is). Safe to call more than once. */
void st_blas_init(int threads);
void st_blas_set_threads(int threads);

#ifdef __cplusplus
}
#endif
#endif
