/* Internal: the wire format of parameter-server messages (transport.h sends
 * them over ZeroMQ). One message is one ZeroMQ frame: a 64-byte header, then
 * payload_len bytes. Integers are little-endian.
 *
 *   offset size field
 *        0    4 magic        "STPS" (0x53505453 read as u32 LE)
 *        4    2 version      ST_PS_FRAME_VERSION
 *        6    2 type         st_ps_msg_type
 *        8    8 job_id       random per job, from the chief
 *       16    2 sender_role  st_ps_role
 *       18    2 sender_index task index in that role
 *       20    4 incarnation  random per process start
 *       24    8 seq          sender's message sequence number
 *       32    8 closure      closure id (PUSH, RUN, ACK, DONE)
 *       40    8 step         global step (PUSH, ACK) or variable version (PULL_OK)
 *       48    8 version      version the gradients were computed from (PUSH)
 *       56    8 payload_len  bytes after the header
 *
 * st__ps_frame_parse checks every field before anything uses it. Pure
 * functions: any thread. */
#ifndef STRATA_DISTRIBUTE_PS_FRAME_H
#define STRATA_DISTRIBUTE_PS_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "ps/cluster.h"

#define ST_PS_FRAME_MAGIC 0x53505453u
#define ST_PS_FRAME_VERSION 1
#define ST_PS_HEADER_BYTES 64

typedef enum st_ps_msg_type {
  ST_PS_MSG_JOB = 1,   /* chief -> server: the job (text payload) */
  ST_PS_MSG_JOB_OK,    /* server -> chief */
  ST_PS_MSG_PULL,      /* worker -> ps: send me your variables */
  ST_PS_MSG_PULL_OK,   /* ps -> worker: the values; step = version */
  ST_PS_MSG_PUSH,      /* worker -> ps: gradients of (closure, step) */
  ST_PS_MSG_ACK,       /* ps -> worker: payload 1 byte: 1 applied, 0 duplicate */
  ST_PS_MSG_RUN,       /* chief -> worker: a closure (its steps and batches) */
  ST_PS_MSG_DONE,      /* worker -> chief: the closure's sums */
  ST_PS_MSG_HEARTBEAT, /* worker -> chief */
  ST_PS_MSG_STATS,     /* chief -> ps */
  ST_PS_MSG_STATS_OK,  /* ps -> chief: counters */
  ST_PS_MSG_STOP,      /* chief -> server: the job is over */
  ST_PS_MSG_ERROR,     /* server -> chief: text payload */
  ST_PS_MSG_FENCE,     /* chief -> ps: refuse pushes of worker `closure`, incarnation `step` */
  ST_PS_MSG_SNAPSHOT,  /* chief -> ps: send your variables and optimizer slots (a backup) */
  ST_PS_MSG_SNAPSHOT_OK, /* ps -> chief: variables then each slot; step = version,
                            closure = updates applied */
  ST_PS_MSG_RESTORE,   /* chief -> ps: variables then slots of a backup; step = the backup's
                          global step (steps below it count as applied, the rest as not),
                          closure = the generation (pushes of older ones are refused) */
  ST_PS_MSG_RESTORE_OK, /* ps -> chief */
  ST_PS_MSG_TYPE_END
} st_ps_msg_type;

typedef struct st_ps_header {
  uint32_t magic;
  uint16_t version, type;
  uint64_t job_id;
  uint16_t sender_role, sender_index;
  uint32_t incarnation;
  uint64_t seq, closure, step, version_seen, payload_len;
} st_ps_header;

/* Why a frame was dropped (counted per reason by the receiver). */
typedef enum st_ps_drop {
  ST_PS_DROP_NONE = 0,
  ST_PS_DROP_SHORT,     /* fewer bytes than a header */
  ST_PS_DROP_MAGIC,
  ST_PS_DROP_VERSION,
  ST_PS_DROP_TYPE,
  ST_PS_DROP_SENDER,    /* role or index out of the cluster */
  ST_PS_DROP_LENGTH,    /* payload_len != bytes after the header, or over the limit */
  ST_PS_DROP_JOB,       /* another job's frame */
  ST_PS_DROP_IDENTITY,  /* header sender is not the authenticated peer */
  ST_PS_DROP_COUNT
} st_ps_drop;

const char *st__ps_drop_name(st_ps_drop d);
const char *st__ps_msg_name(int type);
/* Write h (payload_len included) into out[ST_PS_HEADER_BYTES]. */
void st__ps_header_write(const st_ps_header *h, uint8_t *out);
/* Parse and check a whole frame of len bytes: the header into *h, payload at
 * buf + ST_PS_HEADER_BYTES. job_id 0 accepts any job (a server before its
 * JOB); max_payload bounds payload_len; the sender must be a task of c (when
 * c is not NULL). Returns ST_PS_DROP_NONE or the reason it was refused. */
st_ps_drop st__ps_frame_parse(const uint8_t *buf, size_t len, uint64_t job_id, uint64_t max_payload,
                              const st_ps_cluster *c, st_ps_header *h);

#endif
