/* Optimizers in their Keras forms: SGD (momentum, Nesterov), Adam, AdamW and
 * RMSprop. This file holds the defaults, names and slot layout, and
 * st_optimizer_apply, which evaluates the learning-rate schedule at the step and
 * calls the backend's update kernel on one flat buffer. Slot layout (each slot is
 * a [n] buffer owned by the caller, zeroed before the first step):
 *   SGD      slots[0] = velocity            (only when momentum > 0)
 *   Adam(W)  slots[0] = m, slots[1] = v
 *   RMSprop  slots[0] = mean square, slots[1] = momentum (only when momentum > 0)
 * Weight decay is decoupled as in Keras 3 (p -= lr * wd * p before the update)
 * for every kind; only AdamW defaults it to non-zero. Adding an optimizer: the
 * enum in strata/nn.h, the name table (static_assert), defaults, slot count and
 * apply here. Thread-safe: no state; calls on disjoint buffers may run at once. */
#include "base/args.h"
#include "strata/nn.h"

#include "backend/impl.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <strings.h>

static const char *const k_opt_names[] = {
    [ST_OPT_SGD] = "sgd",
    [ST_OPT_ADAM] = "adam",
    [ST_OPT_ADAMW] = "adamw",
    [ST_OPT_RMSPROP] = "rmsprop",
};
static_assert(sizeof k_opt_names / sizeof k_opt_names[0] == ST_OPT_COUNT,
              "k_opt_names must name every st_optimizer_kind");

st_optimizer_options st_optimizer_default_options(st_optimizer_kind kind) {
  st_optimizer_options o = {
      .kind = kind,
      .lr = st_schedule_constant(1e-3f),
      .momentum = 0.0f,
      .nesterov = false,
      .beta1 = 0.9f,
      .beta2 = 0.999f,
      .epsilon = 1e-7f,
      .rho = 0.9f,
      .weight_decay = 0.0f,
  };
  if (kind == ST_OPT_SGD) o.lr = st_schedule_constant(0.01f);
  if (kind == ST_OPT_ADAMW) o.weight_decay = 0.004f;
  return o;
}

const char *st_optimizer_name(st_optimizer_kind k) {
  if ((int)k < 0 || k >= ST_OPT_COUNT) return "unknown";
  return k_opt_names[k];
}

st_status st_optimizer_parse(const char *name, st_optimizer_kind *out) {
  ST_REQUIRE(name);
  ST_REQUIRE(out);
  if (name) {
    for (int i = 0; i < ST_OPT_COUNT; i++) {
      if (strcasecmp(name, k_opt_names[i]) == 0) {
        *out = (st_optimizer_kind)i;
        return ST_OK;
      }
    }
  }
  return st_error(ST_ERR_INVALID,
                  "unknown optimizer '%s' (valid: sgd, adam, adamw, rmsprop)",
                  name ? name : "(null)");
}

float st_optimizer_clip_factor(const st_optimizer_options *o, double sum_squares) {
  if (!o || !(o->global_clipnorm > 0.0f)) return 1.0f;
  double norm = sqrt(sum_squares);
  return norm > (double)o->global_clipnorm ? (float)((double)o->global_clipnorm / (norm + 1e-6))
                                           : 1.0f;
}

int st_optimizer_slot_count(const st_optimizer_options *o) {
  if (!o) return 0;
  switch (o->kind) {
    case ST_OPT_SGD: return o->momentum > 0.0f ? 1 : 0;
    case ST_OPT_ADAM:
    case ST_OPT_ADAMW: return 2;
    case ST_OPT_RMSPROP: return o->momentum > 0.0f ? 2 : 1;
    default: return 0;
  }
}

/* p *= (1 - lr*wd): Keras's decoupled weight decay, applied before the update. */
static void decay_weights(st_backend_ctx *ctx, size_t n, float lr, float wd,
                          float *p) {
  if (wd > 0.0f) ctx->be->scale(ctx, n, 1.0f - lr * wd, p);
}

void st_optimizer_apply(const st_optimizer_options *o, st_backend_ctx *ctx,
                        int64_t step, size_t n, float *params,
                        const float *grads, float **slots) {
  /* void: a NULL argument or an unknown kind changes nothing */
  if (n == 0 || !o || !ctx || !params || !grads || (unsigned)o->kind >= ST_OPT_COUNT) return;
  if (st_optimizer_slot_count(o) > 0 && !slots) return;
  const st_backend *be = ctx->be;
  float lr = st_schedule_lr(&o->lr, step);
  switch (o->kind) {
    case ST_OPT_SGD:
      decay_weights(ctx, n, lr, o->weight_decay, params);
      if (o->momentum > 0.0f)
        be->sgd_update(ctx, n, lr, o->momentum, o->nesterov, params, grads,
                       slots[0]);
      else /* momentum 0 (Nesterov or not): p -= lr*g, no slot */
        be->axpy(ctx, n, -lr, grads, params);
      break;
    case ST_OPT_ADAM:
    case ST_OPT_ADAMW: {
      /* torch's eps on sqrt(v_hat) is Keras's kernel with eps * sqrt(1 - beta2^t) */
      float eps = o->torch_form ? (float)((double)o->epsilon *
                                          sqrt(1.0 - pow((double)o->beta2, (double)(step + 1))))
                                : o->epsilon;
      be->adam_update(ctx, n, lr, o->beta1, o->beta2, eps, o->weight_decay,
                      step + 1, params, grads, slots[0], slots[1]);
      break;
    }
    case ST_OPT_RMSPROP:
      decay_weights(ctx, n, lr, o->weight_decay, params);
      be->rmsprop_update(ctx, n, lr, o->rho, o->momentum, o->epsilon, params, grads,
                         slots[0], o->momentum > 0.0f ? slots[1] : NULL);
      break;
    default:
      ST_ASSERT(!"unknown optimizer kind");
  }
}
