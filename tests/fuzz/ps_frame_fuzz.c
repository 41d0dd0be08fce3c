/* libFuzzer target: the parameter-server frame parser (st__ps_frame_parse,
 * src/ps/frame.c). The first byte picks the receiver's limits
 * (bit 0: a job id of 42 expected, else any; bit 1: a 64-byte payload limit,
 * else 1 MiB; bit 2: check the sender against a cluster of 1 chief, 2
 * workers and 2 ps); the rest is the frame. An accepted frame must keep every
 * promise of frame.h (magic, version, known type, sender in range, payload
 * length equal to the bytes after the header and within the limit, the job);
 * its header written again must give the same bytes. Traps otherwise. */
#include "ps/frame.h"
#include "fuzz_common.h"

static st_ps_cluster ps_frame_cluster_(void) {
  static st_ps_task chief[1], workers[2], ps[2];
  st_ps_cluster c;
  memset(&c, 0, sizeof c);
  c.count[ST_PS_CHIEF] = 1, c.count[ST_PS_WORKER] = 2, c.count[ST_PS_PS] = 2;
  c.tasks[ST_PS_CHIEF] = chief, c.tasks[ST_PS_WORKER] = workers, c.tasks[ST_PS_PS] = ps;
  return c;
}

int st_fuzz_ps_frame(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  uint8_t mode = data[0];
  const uint8_t *f = data + 1;
  size_t n = size - 1;
  uint64_t job = (mode & 1) ? 42 : 0, max = (mode & 2) ? 64 : (1u << 20);
  st_ps_cluster c = ps_frame_cluster_();
  st_ps_header h;
  st_ps_drop d = st__ps_frame_parse(f, n, job, max, (mode & 4) ? &c : NULL, &h);
  if ((unsigned)d >= ST_PS_DROP_COUNT) abort();
  if (d != ST_PS_DROP_NONE) return 0;
  if (n < ST_PS_HEADER_BYTES || h.magic != ST_PS_FRAME_MAGIC || h.version != ST_PS_FRAME_VERSION)
    abort();
  if (h.type == 0 || h.type >= ST_PS_MSG_TYPE_END || h.sender_role >= ST_PS_ROLE_COUNT) abort();
  if ((mode & 4) && h.sender_index >= c.count[h.sender_role]) abort();
  if (h.payload_len != n - ST_PS_HEADER_BYTES || h.payload_len > max) abort();
  if (job && h.job_id != job) abort();
  uint8_t again[ST_PS_HEADER_BYTES];
  st__ps_header_write(&h, again);
  if (memcmp(again, f, ST_PS_HEADER_BYTES)) abort();
  volatile uint8_t sink = 0; /* touch the payload: a short buffer shows under ASan */
  if (h.payload_len) sink ^= f[ST_PS_HEADER_BYTES] ^ f[n - 1];
  (void)sink;
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return st_fuzz_ps_frame(data, size); }
#endif
