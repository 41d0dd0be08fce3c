/* Internal to src/train: every callback state allocated by the library starts
 * with this header, so st_callback_free (callbacks.c) can release any of them
 * (CSVLogger, EarlyStopping, LearningRateScheduler, ModelCheckpoint,
 * TensorBoard). */
#ifndef STRATA_TRAIN_CALLBACK_STATE_H
#define STRATA_TRAIN_CALLBACK_STATE_H

typedef struct st__cb_state {
  void (*destroy)(void *self);
} st__cb_state;

#endif
