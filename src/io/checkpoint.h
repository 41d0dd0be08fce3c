/* Internal to src/io: checkpoint helpers and the variable naming shared by
 * weights.c (save/load_weights) and checkpoint.c. */
#ifndef STRATA_IO_CHECKPOINT_H
#define STRATA_IO_CHECKPOINT_H

#include "distribute/strategy.h"
#include "model/model.h"
#include "io/safetensors.h"

/* The identity of a training run that a backup records (state.json's
 * "identity") and a resume checks: besides these, the model's structure CRC
 * (st__net_structure_crc), optimizer, learning rate schedule as compiled and
 * seed, which the model gives. */
typedef struct st__run_identity {
  int64_t global_batch; /* <= 0: not recorded / not checked */
  const char *data;     /* the caller's data fingerprint; NULL: not recorded / not checked */
  bool anyway;          /* restore: resume despite a mismatch, with this run's values */
} st__run_identity;

/* st_checkpoint_save / st_checkpoint_restore with the training position
 * given: the writer saves *pos (fit's position, or the model's last one);
 * the reader replaces *at (its logs freed) with the position it read, only
 * when everything checked out. Variables, step and learning rate go to and
 * come from the model as in the public functions. Caller's thread.
 * id (may be NULL): the writer records it with the model's identity; the
 * reader compares the identity recorded (fields missing from an older file
 * are not checked) with the model's and *id's before anything changes, and
 * refuses a mismatch (ST_ERR_INVALID naming the field and both values)
 * unless id->anyway (then it logs a warning and keeps this run's learning
 * rate rather than the backup's). */
st_status st__checkpoint_save_at(st_model *m, const char *dir, const st_checkpoint_options *o,
                                 const st_train_position *pos, const st__run_identity *id);
st_status st__checkpoint_restore_at(st_model *m, const char *dir, st_train_position *at,
                                    const st__run_identity *id);

/* Variables of the model, in layer order. */
int st__model_var_count(const st_model *m);
/* Name ("<layer>/<param>") and shape of parameter p of layer l. */
void st__describe_var(const st_layer *l, int p, st_named_tensor *t);
/* Whether parameter p of layer l is held by this process: always, but for a
 * pipeline stage across processes (n->reserved) only its layers' share. */
bool st__var_is_local(const st_net *n, const st_layer *l, int p);
/* The same for its optimizer slots (a pipeline's tied table, net.h tie_p:
 * held with its slots by the head's stage only). */
bool st__slots_are_local(const st_net *n, const st_layer *l, int p);
/* got must exist and have want's shape; errors name path and tensor. */
st_status st__check_tensor(const char *path, const st_named_tensor *want,
                           const st_named_tensor *got);
/* Remove every checkpoint Strata wrote in dir (ckpt-*, latest, temporaries),
 * then dir itself if it is empty. Best effort. */
void st__checkpoint_remove_all(const char *dir);
/* CRC32C of the compact, key-sorted dump of state.json's object without its
 * "state_crc32c" field (json_t from jansson). */
struct json_t;
uint32_t st__ckpt_state_crc(struct json_t *o);
/* The exact text state.json holds for o (indented, key-sorted, reals with 17
 * digits; caller frees). The loader requires the file to equal it, so a
 * flipped bit that parses to the same values (a 17th digit, a space) is
 * caught as well as one the CRC sees. */
char *st__ckpt_state_text(struct json_t *o);

/* CRC32C of the bytes of the file at path, read in 64 KiB pieces. */
st_status st__ckpt_file_crc(const char *path, uint32_t *crc);

#endif
