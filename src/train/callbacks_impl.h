/* What fit asks of the library's own callbacks before epoch 1 (Keras checks
 * these in on_train_begin: a monitor that needs validation data when fit has
 * none is an error before anything trains, not after the first epoch) and
 * after the last (on_train_end). */
#ifndef STRATA_TRAIN_CALLBACKS_IMPL_H
#define STRATA_TRAIN_CALLBACKS_IMPL_H

#include "strata/train.h"

/* ST_ERR_INVALID naming the callback (its index in the list) and its monitor
 * when an EarlyStopping or a save-best-only ModelCheckpoint among cbs[0..n)
 * monitors val_loss or val_accuracy and has_validation is false. Callbacks
 * made by hand are not looked at. */
st_status st__callbacks_check_fit(const st_callback *cbs, int n, bool has_validation);

/* Keras's on_train_end for the library's own callbacks, once fit's last epoch
 * and every callback's hooks for it have run: an EarlyStopping that stopped
 * training with restore_best_weights puts the best epoch's weights back. */
st_status st__callbacks_train_end(st_model *m, const st_callback *cbs, int n);

#endif
