/* Internal: the variable-placement interface — where the variables of a
 * net live and how compile, save, restore, load, get/set_weights and custom
 * loops reach them. model/ and io/ call only the st__vars_* functions below,
 * never a strategy's internals; each strategy points its st_strategy.vars at
 * one table:
 *
 *   st__shared_placement    (central_storage.c) one_device, central_storage:
 *                           the net's own buffers; replicas keep copies of
 *                           the non-trainable state only;
 *   st__mirrored_placement  (mirrored.c) mirrored, multi_worker_mirrored:
 *                           replica copies (replica 0's are the net's), and
 *   st__sharded_placement   the same with --shard-optimizer's sharded slots;
 *   st__stages_placement    (pipeline.c) the pipeline in one process: each
 *                           stage a disjoint range of the net's buffers;
 *   st__procs_placement     (pipeline_procs.c) the pipeline across
 *                           processes: stage-local variables in reserved
 *                           address space, the other stages' tensors
 *                           streamed to the chief when it saves.
 *
 * Every entry may be NULL: the default is that of the net's own host
 * buffers. A save reads one tensor at a time (read): the default copies it
 * to the caller's buffer with the net's backend (st__be_to_host), so a table
 * for GPU replicas (device memory) needs no more than its place / publish /
 * gather_* entries: read already goes through the backend, and a device
 * table may override it to copy from whichever replica holds the value.
 * Caller's thread throughout; the entries marked "every process" are
 * collectives across the cluster's workers. */
#ifndef STRATA_DISTRIBUTE_PLACEMENT_H
#define STRATA_DISTRIBUTE_PLACEMENT_H

#include "nn/net.h"
#include "strata/distribute.h"

typedef struct st_var_placement {
  const char *name;
  /* compile, instead of allocating the net's variables, state and slots in
   * host memory: make them (e.g. reserve the layout and commit and
   * initialise a stage's share, setting st_net.reserved). */
  st_status (*place)(st_strategy *s, st_net *m);
  /* Every process, before every variable is read (get_weights): afterwards
   * every process's net holds them all (until the next step). */
  st_status (*gather_vars)(st_strategy *s, st_net *m);
  /* Every process, before a checkpoint is written: the chief's net->slots
   * then hold every optimizer slot (sharded slots). */
  st_status (*gather_slots)(st_strategy *s, st_net *m);
  /* Local, before every variable of the net is written (restore, load,
   * set_weights): the whole layout becomes memory. */
  st_status (*expose)(st_strategy *s, st_net *m);
  /* After the net's variables (and slots) were written: the replicas take
   * them (broadcast, state copies), or a stage keeps only its share. */
  void (*publish)(st_strategy *s, st_net *m);
  /* Local replica i's optimizer slots (custom loops apply updates to its
   * copy). NULL: the net's slots. */
  float **(*replica_slots)(st_strategy *s, int i);
  /* A save, every process: before the chief writes, a process that does
   * not write serves its tensors (streams them to the chief) and sets
   * *served; with_slots: the optimizer slots too (checkpoints). */
  st_status (*serve)(st_strategy *s, st_net *m, bool with_slots, bool *served);
  /* The chief's side of a save: begin before the first read (with_slots as
   * the servers'), read parameter `param` of layer `layer` (slot -1) or its
   * optimizer slot `slot` (*data: the chief's own memory or buf, room for
   * the largest variable), end after the last read or when the save failed
   * (failed: its status, whose message stays): servers not asked for all
   * their tensors are told to stop. Tensors are read in file order. */
  void (*begin)(st_strategy *s, st_net *m, bool with_slots);
  st_status (*read)(st_strategy *s, st_net *m, int layer, int param, int slot, float *buf,
                    const float **data);
  void (*end)(st_strategy *s, st_net *m, st_status failed);
} st_var_placement;

/* The calls model/ and io/ make (s may be NULL: a net without a strategy
 * uses the defaults). *placed: false when compile must allocate itself. */
st_status st__vars_place(st_strategy *s, st_net *m, bool *placed);
st_status st__vars_gather(st_strategy *s, st_net *m);
st_status st__vars_gather_slots(st_strategy *s, st_net *m);
st_status st__vars_expose(st_strategy *s, st_net *m);
void st__vars_publish(st_strategy *s, st_net *m);
float **st__vars_replica_slots(st_strategy *s, st_net *m, int i);
st_status st__vars_serve(st_strategy *s, st_net *m, bool with_slots, bool *served);
void st__vars_begin(st_strategy *s, st_net *m, bool with_slots);
st_status st__vars_read(st_strategy *s, st_net *m, int layer, int param, int slot, float *buf,
                        const float **data);
void st__vars_end(st_strategy *s, st_net *m, st_status failed);

#endif
