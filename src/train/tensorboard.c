/* The Keras-style TensorBoard callback: writes epoch_* and batch_* scalars
 * through an st_tensorboard (the event-file writer, src/io/tensorboard.c).
 * A callback's state is used by the thread running fit. */
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "strata/train.h"

/* ---- the callback ------------------------------------------------------------ */
/* Tags as Keras writes them: epoch_* per epoch (validation under the same tags
 * in the validation run), batch_* every update_freq steps; speed as
 * epoch_samples_per_sec. */
typedef struct tb_callback {
  st_tensorboard *tb; /* borrowed */
  int update_freq;
  int64_t global_step; /* last batch step written or seen, 1-based */
} tb_callback;

static void tb_destroy(void *self) { free(self); }

static st_status tb_on_batch_end(void *user, st_model *m, const st_batch_logs *l) {
  tb_callback *c = user;
  (void)m;
  /* Derived from (epoch, step) when steps per epoch is known, so a resumed fit
   * continues the same step axis; else counted. */
  int64_t g = l->steps > 0 ? (int64_t)l->epoch * l->steps + l->step + 1 : c->global_step + 1;
  c->global_step = g;
  if (c->update_freq <= 0 || g % c->update_freq != 0) return ST_OK;
  st_status s = st_tensorboard_scalar(c->tb, false, "batch_loss", g, l->loss);
  if (s == ST_OK) s = st_tensorboard_scalar(c->tb, false, "batch_accuracy", g, l->accuracy);
  return s;
}

static st_status tb_on_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  tb_callback *c = user;
  (void)m;
  st_tensorboard *tb = c->tb;
  int64_t e = l->epoch;
  st_status s = st_tensorboard_scalar(tb, false, "epoch_loss", e, l->loss);
  if (s == ST_OK) s = st_tensorboard_scalar(tb, false, "epoch_accuracy", e, l->accuracy);
  if (s == ST_OK) s = st_tensorboard_scalar(tb, false, "epoch_learning_rate", e, l->lr);
  if (s == ST_OK && l->seconds > 0)
    s = st_tensorboard_scalar(tb, false, "epoch_samples_per_sec", e,
                              (double)l->examples / l->seconds);
  if (s == ST_OK && l->has_validation) {
    s = st_tensorboard_scalar(tb, true, "epoch_loss", e, l->val_loss);
    if (s == ST_OK) s = st_tensorboard_scalar(tb, true, "epoch_accuracy", e, l->val_accuracy);
  }
  if (s == ST_OK) s = st_tensorboard_flush(tb);
  return s;
}

st_status st_tensorboard_callback_create(st_tensorboard *tb, int update_freq, st_callback *out) {
  ST_REQUIRE(out);
  memset(out, 0, sizeof *out);
  if (!tb) return st_error(ST_ERR_INVALID, "st_tensorboard_callback_create: tb is NULL (TensorBoard callback: no event writer)");
  if (update_freq < 0)
    return st_error(ST_ERR_INVALID, "TensorBoard callback: update_freq %d (must be >= 0)",
                    update_freq);
  tb_callback *c = calloc(1, sizeof *c); /* freed by tb_destroy */
  if (!c) return st_error(ST_ERR_NOMEM, "TensorBoard: out of memory for the callback's state");
  c->tb = tb;
  c->update_freq = update_freq;
  *out = (st_callback){.user = c, .on_batch_end = tb_on_batch_end,
                       .on_epoch_end = tb_on_epoch_end, .destroy = tb_destroy};
  return ST_OK;
}
