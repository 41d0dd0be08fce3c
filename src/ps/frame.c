/* The parameter-server frame header: writing it and checking every field of a
 * received one (frame.h has the layout). */
#include "ps/frame.h"

#include <string.h>

static const char *const k_drop[ST_PS_DROP_COUNT] = {
    "none", "short frame", "bad magic", "bad version", "unknown message type",
    "sender not in the cluster", "bad payload length", "another job", "sender identity mismatch"};

static const char *const k_msg[ST_PS_MSG_TYPE_END] = {
    "?", "JOB", "JOB_OK", "PULL", "PULL_OK", "PUSH", "ACK", "RUN", "DONE", "HEARTBEAT", "STATS",
    "STATS_OK", "STOP", "ERROR", "FENCE", "SNAPSHOT", "SNAPSHOT_OK", "RESTORE", "RESTORE_OK"};

const char *st__ps_drop_name(st_ps_drop d) {
  return (unsigned)d < ST_PS_DROP_COUNT ? k_drop[d] : "?";
}

const char *st__ps_msg_name(int type) {
  return type > 0 && type < ST_PS_MSG_TYPE_END ? k_msg[type] : "?";
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

void st__ps_header_write(const st_ps_header *h, uint8_t *out) {
  put32(out, ST_PS_FRAME_MAGIC);
  put16(out + 4, ST_PS_FRAME_VERSION);
  put16(out + 6, h->type);
  put64(out + 8, h->job_id);
  put16(out + 16, h->sender_role);
  put16(out + 18, h->sender_index);
  put32(out + 20, h->incarnation);
  put64(out + 24, h->seq);
  put64(out + 32, h->closure);
  put64(out + 40, h->step);
  put64(out + 48, h->version_seen);
  put64(out + 56, h->payload_len);
}

st_ps_drop st__ps_frame_parse(const uint8_t *buf, size_t len, uint64_t job_id, uint64_t max_payload,
                              const st_ps_cluster *c, st_ps_header *h) {
  memset(h, 0, sizeof *h);
  if (!buf || len < ST_PS_HEADER_BYTES) return ST_PS_DROP_SHORT;
  h->magic = get32(buf);
  if (h->magic != ST_PS_FRAME_MAGIC) return ST_PS_DROP_MAGIC;
  h->version = get16(buf + 4);
  if (h->version != ST_PS_FRAME_VERSION) return ST_PS_DROP_VERSION;
  h->type = get16(buf + 6);
  if (h->type == 0 || h->type >= ST_PS_MSG_TYPE_END) return ST_PS_DROP_TYPE;
  h->job_id = get64(buf + 8);
  h->sender_role = get16(buf + 16);
  h->sender_index = get16(buf + 18);
  if (h->sender_role >= ST_PS_ROLE_COUNT || h->sender_index >= ST_PS_MAX_TASKS)
    return ST_PS_DROP_SENDER;
  if (c && h->sender_index >= c->count[h->sender_role]) return ST_PS_DROP_SENDER;
  h->incarnation = get32(buf + 20);
  h->seq = get64(buf + 24);
  h->closure = get64(buf + 32);
  h->step = get64(buf + 40);
  h->version_seen = get64(buf + 48);
  h->payload_len = get64(buf + 56);
  if (h->payload_len != len - ST_PS_HEADER_BYTES || h->payload_len > max_payload)
    return ST_PS_DROP_LENGTH;
  if (job_id && h->job_id != job_id) return ST_PS_DROP_JOB;
  return ST_PS_DROP_NONE;
}
