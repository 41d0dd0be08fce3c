/* Strata backend layer, public part: the activation and loss kinds with their
 * names, looking a backend up by name, and the BLAS set-up. The backend table
 * itself (one table of kernels per device kind, every slot taking a
 * per-device context) is private: src/backend/impl.h.
 *
 * Layouts: row-major; images NHWC (Keras's channels_last); all float32. */
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
  ST_ACT_RELU6,   /* min(max(x, 0), 6) (Keras "relu6") */
  ST_ACT_LEAKY_RELU, /* x >= 0 ? x : 0.2 x (Keras "leaky_relu", its default slope) */
  ST_ACT_GELU_TANH,  /* tanh approximation of GELU (Keras approximate=True;
                        named "gelu_approximate") */
  ST_ACT_COUNT
} st_activation;
const char *st_activation_name(st_activation a);          /* "relu" */
/* The activation named name ("relu", Keras names); ST_ERR_INVALID naming it
 * when unknown or NULL. */
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
/* The loss's name ("sparse_categorical_crossentropy_from_logits", ...), and the
 * kind a name gives (ST_ERR_INVALID naming it when unknown). */
const char *st_loss_name(st_loss_kind k);
st_status st_loss_parse(const char *name, st_loss_kind *out);
bool st_loss_is_sparse(st_loss_kind k); /* labels are [rows] class indices */

/* A backend: one table of kernels per device kind ("cpu", "reference",
 * "cuda"), opaque here; its slots (src/backend/impl.h) take a per-device
 * context, st_backend_ctx, that the replica or model running them owns. */
typedef struct st_backend st_backend;
typedef struct st_backend_ctx st_backend_ctx;

/* Backend by name ("cpu", "reference", "cuda"); ST_ERR_NOT_BUILT if absent. */
st_status st_backend_get(const char *name, const st_backend **out);

/* A context of backend be for one user of its device `device_index` (the
 * stream, handles and scratch a replica needs; threads: the kernel threads it
 * may use, 0 = the backend's default). Kernels run through a context, e.g.
 * st_optimizer_apply. The caller owns *out and frees it with
 * st_backend_ctx_destroy once no kernel runs on it. Any thread. */
st_status st_backend_ctx_create(const st_backend *be, int device_index,
                                int threads, st_backend_ctx **out);
void st_backend_ctx_destroy(st_backend_ctx *ctx); /* accepts NULL */

/* Configure the BLAS library before first use: pick the right OpenBLAS core on
 * machines where its detection falls back to a generic one, and set its thread
 * count (0 = leave as is). Safe to call more than once. */
void st_blas_init(int threads);
void st_blas_set_threads(int threads);

#ifdef __cplusplus
}
#endif
#endif
