/* Learning-rate schedules as Keras defines them: constant, ExponentialDecay
 * (initial * rate^(step/decay_steps), optionally floored to whole intervals) and
 * CosineDecay without warmup (step clipped at decay_steps, decaying from initial
 * to alpha*initial along half a cosine). Pure functions; any thread. */
#include "strata/nn.h"

#include <math.h>

st_schedule st_schedule_constant(float lr) {
  st_schedule s = {.kind = ST_SCHEDULE_CONSTANT,
                   .initial = lr,
                   .decay_steps = 0,
                   .decay_rate = 1.0f,
                   .staircase = false,
                   .alpha = 0.0f};
  return s;
}

st_status st_schedule_check(const st_schedule *s) {
  const char *fn = "st_schedule_check";
  if (!s) return st_error(ST_ERR_INVALID, "%s: s is NULL", fn);
  if ((unsigned)s->kind >= ST_SCHEDULE_COUNT)
    return st_error(ST_ERR_INVALID, "%s: kind %d out of range", fn, (int)s->kind);
  if (!isfinite(s->initial) || !(s->initial > 0.0f))
    return st_error(ST_ERR_INVALID, "%s: initial learning rate %g (must be finite and > 0)", fn,
                    (double)s->initial);
  if (s->kind == ST_SCHEDULE_CONSTANT) return ST_OK;
  if (s->decay_steps < 0)
    return st_error(ST_ERR_INVALID, "%s: decay_steps %lld is negative", fn,
                    (long long)s->decay_steps);
  if (s->kind == ST_SCHEDULE_EXPONENTIAL && (!isfinite(s->decay_rate) || !(s->decay_rate > 0.0f)))
    return st_error(ST_ERR_INVALID, "%s: exponential decay_rate %g (must be finite and > 0: "
                    "the learning rate would not stay positive)", fn, (double)s->decay_rate);
  if (s->kind == ST_SCHEDULE_COSINE && s->warmup_steps &&
      (s->warmup_steps < 0 || !isfinite(s->warmup_target) || !(s->warmup_target > 0.0f)))
    return st_error(ST_ERR_INVALID, "%s: cosine warmup_steps %lld / warmup_target %g (steps >= 0, "
                    "target finite and > 0)", fn, (long long)s->warmup_steps,
                    (double)s->warmup_target);
  if (s->kind == ST_SCHEDULE_COSINE && !(s->alpha >= 0.0f && s->alpha <= 1.0f))
    return st_error(ST_ERR_INVALID, "%s: cosine alpha %g (must be in [0, 1]: the final "
                    "fraction of the initial learning rate)", fn, (double)s->alpha);
  return ST_OK;
}

/* Computed in double so long runs do not drift; decay_steps <= 0 means no
 * decay (validation of options belongs to compile). */
float st_schedule_lr(const st_schedule *s, int64_t step) {
  if (!s) return 0.0f;
  if (step < 0) step = 0;
  switch (s->kind) {
    case ST_SCHEDULE_EXPONENTIAL: {
      if (s->decay_steps <= 0) return s->initial;
      double p = (double)step / (double)s->decay_steps;
      if (s->staircase) p = floor(p);
      return (float)((double)s->initial * pow((double)s->decay_rate, p));
    }
    case ST_SCHEDULE_COSINE: {
      double top = s->initial;
      if (s->warmup_steps > 0) { /* Keras CosineDecay's _warmup_function */
        if (step < s->warmup_steps)
          return (float)(top + ((double)s->warmup_target - top) * (double)step /
                                   (double)s->warmup_steps);
        top = s->warmup_target;
        step -= s->warmup_steps;
      }
      if (s->decay_steps <= 0) return (float)top;
      int64_t t = step < s->decay_steps ? step : s->decay_steps;
      double frac = (double)t / (double)s->decay_steps;
      double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * frac));
      double decayed = (1.0 - (double)s->alpha) * cosine + (double)s->alpha;
      return (float)(top * decayed);
    }
    case ST_SCHEDULE_CONSTANT:
    default:
      return s->initial;
  }
}
