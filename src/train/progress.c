/* The Keras-style progress callback: on a terminal, a bar per epoch redrawn in
 * place ("125/469 [====>.....] - ETA: 12s - loss: 0.4567 - accuracy: 0.8345");
 * otherwise one plain line per epoch. Writes to the stream it was given. */
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "model/model.h"
#include "strata/train.h"

typedef struct progress {
  FILE *f;
  bool tty;
  int epochs_hint;
  double t_epoch, t_last_draw;
} progress;

static void fmt_eta(double s, char *buf, size_t n) {
  if (s >= 3600)
    snprintf(buf, n, "%d:%02d:%02d", (int)s / 3600, ((int)s % 3600) / 60, (int)s % 60);
  else if (s >= 60)
    snprintf(buf, n, "%d:%02d", (int)s / 60, (int)s % 60);
  else
    snprintf(buf, n, "%ds", (int)(s + 0.5));
}

static st_status on_epoch_begin(void *user, st_model *m, int epoch) {
  progress *p = user;
  (void)m;
  p->t_epoch = st_now_seconds();
  p->t_last_draw = 0;
  if (p->tty) fprintf(p->f, "Epoch %d/%d\n", epoch + 1, p->epochs_hint);
  return ST_OK;
}

static st_status on_batch_end(void *user, st_model *m, const st_batch_logs *l) {
  progress *p = user;
  (void)m;
  if (!p->tty) return ST_OK;
  double now = st_now_seconds();
  bool last = l->steps > 0 && l->step + 1 == l->steps;
  if (!last && now - p->t_last_draw < 0.1) return ST_OK;
  p->t_last_draw = now;
  int width = 30, done = l->step + 1;
  char bar[64], eta[32];
  int fill = l->steps > 0 ? (int)((int64_t)width * done / l->steps) : 0;
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : '.';
  if (fill > 0 && fill < width) bar[fill - 1] = '>';
  bar[width] = 0;
  double per = (now - p->t_epoch) / done;
  fmt_eta(per * (double)(l->steps - done), eta, sizeof eta);
  if (l->steps > 0)
    fprintf(p->f, "\r%lld/%lld [%s] - ETA: %s - loss: %.4f - accuracy: %.4f",
            (long long)done, (long long)l->steps, bar, eta, l->loss, l->accuracy);
  else
    fprintf(p->f, "\r%lld - loss: %.4f - accuracy: %.4f", (long long)done, l->loss, l->accuracy);
  fflush(p->f);
  return ST_OK;
}

/* Several outputs: " - <layer>_loss: x - <layer>_accuracy: y" per output
 * (val_ prefixed for the validation figures), as Keras names them. */
static void print_outputs(FILE *f, const st_model *m, const st_epoch_logs *l, bool val) {
  for (int j = 0; j < l->noutputs && j < m->net.n_outputs; j++) {
    const char *name = m->net.layers[m->net.nodes[m->net.outputs[j]].layer]->name;
    fprintf(f, " - %s%s_loss: %.4f - %s%s_accuracy: %.4f", val ? "val_" : "", name,
            val ? l->val_output_loss[j] : l->output_loss[j], val ? "val_" : "", name,
            val ? l->val_output_accuracy[j] : l->output_accuracy[j]);
  }
}

static st_status on_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  progress *p = user;
  if (p->tty)
    fprintf(p->f, "\r\033[K%lld/%lld [==============================] - %.0fs - loss: %.4f - accuracy: %.4f",
            (long long)l->steps, (long long)l->steps, l->seconds, l->loss, l->accuracy);
  else
    fprintf(p->f, "Epoch %d/%d: %lld steps - %.1fs - loss: %.4f - accuracy: %.4f", l->epoch + 1,
            p->epochs_hint, (long long)l->steps, l->seconds, l->loss, l->accuracy);
  print_outputs(p->f, m, l, false);
  if (l->has_validation)
    fprintf(p->f, " - val_loss: %.4f - val_accuracy: %.4f", l->val_loss, l->val_accuracy);
  if (l->has_validation) print_outputs(p->f, m, l, true);
  fprintf(p->f, "\n");
  fflush(p->f);
  return ST_OK;
}

static void progress_destroy(void *user) { free(user); }

st_status st_progress_create(FILE *stream, bool tty, int epochs, st_callback *out) {
  ST_REQUIRE(out);
  memset(out, 0, sizeof *out);
  if (!stream) return st_error(ST_ERR_INVALID, "st_progress_create: stream is NULL (progress: no output stream)");
  progress *p = calloc(1, sizeof *p); /* freed by progress_destroy */
  if (!p) return st_error(ST_ERR_NOMEM, "progress: out of memory for the callback's state");
  p->f = stream;
  p->tty = tty;
  p->epochs_hint = epochs;
  *out = (st_callback){.user = p, .on_epoch_begin = on_epoch_begin,
                       .on_batch_end = on_batch_end, .on_epoch_end = on_epoch_end,
                       .destroy = progress_destroy};
  return ST_OK;
}
