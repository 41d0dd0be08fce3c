/* Accuracy metrics as Keras computes them, returned as counts so replicas and
 * workers can sum them before dividing. "accuracy" resolves by the loss like
 * Keras: sparse losses -> sparse categorical accuracy, categorical CE ->
 * categorical accuracy, binary CE -> binary accuracy, MSE -> categorical when
 * cols > 1 else binary. Categorical kinds count rows (denominator: rows); binary
 * accuracy counts ELEMENTS (denominator: rows * cols, which for cols == 1 is the
 * row count; this equals Keras's per-example mean over the last axis averaged
 * over the batch). Binary thresholds: 0.5 on probabilities, 0 on logits
 * (BCE_LOGITS), labels counted positive when > 0.5. Argmax ties go to the first
 * maximum (tf.argmax). Pure functions on host memory; any thread. */
#include "strata/nn.h"

#include <math.h>

/* Index of the first maximum of x[0..n); NaNs never win. */
static int argmax(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
  return best;
}

static int64_t sparse_correct(int rows, int cols, const float *pred,
                              const float *y) {
  int64_t n = 0;
  for (int r = 0; r < rows; r++) {
    long label = lroundf(y[r]);
    n += argmax(pred + (size_t)r * cols, cols) == label;
  }
  return n;
}

static int64_t categorical_correct(int rows, int cols, const float *pred,
                                   const float *y) {
  int64_t n = 0;
  for (int r = 0; r < rows; r++) {
    size_t off = (size_t)r * cols;
    n += argmax(pred + off, cols) == argmax(y + off, cols);
  }
  return n;
}

static int64_t binary_correct(int rows, int cols, const float *pred,
                              const float *y, float threshold) {
  int64_t n = 0;
  size_t total = (size_t)rows * (size_t)cols;
  for (size_t i = 0; i < total; i++) n += (pred[i] > threshold) == (y[i] > 0.5f);
  return n;
}

/* The concrete metric "accuracy" stands for under this loss. */
static st_metric_kind resolve_accuracy(st_loss_kind loss, int cols) {
  switch (loss) {
    case ST_LOSS_SPARSE_CE:
    case ST_LOSS_SPARSE_CE_LOGITS: return ST_METRIC_SPARSE_CATEGORICAL_ACCURACY;
    case ST_LOSS_CE:
    case ST_LOSS_CE_LOGITS: return ST_METRIC_CATEGORICAL_ACCURACY;
    case ST_LOSS_BCE:
    case ST_LOSS_BCE_LOGITS: return ST_METRIC_BINARY_ACCURACY;
    default:
      return cols > 1 ? ST_METRIC_CATEGORICAL_ACCURACY
                      : ST_METRIC_BINARY_ACCURACY;
  }
}

int64_t st_metric_correct(st_metric_kind m, st_loss_kind loss, int rows,
                          int cols, const float *pred, const float *y) {
  if (rows <= 0 || cols <= 0 || !pred || !y) return 0;
  if (m == ST_METRIC_ACCURACY) m = resolve_accuracy(loss, cols);
  switch (m) {
    case ST_METRIC_SPARSE_CATEGORICAL_ACCURACY:
      return sparse_correct(rows, cols, pred, y);
    case ST_METRIC_CATEGORICAL_ACCURACY:
      return categorical_correct(rows, cols, pred, y);
    case ST_METRIC_BINARY_ACCURACY:
      return binary_correct(rows, cols, pred, y,
                            loss == ST_LOSS_BCE_LOGITS ? 0.0f : 0.5f);
    default: /* compile refuses unknown kinds; a direct call counts nothing */
      return 0;
  }
}
