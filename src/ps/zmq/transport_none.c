/* The parameter-server transport when Strata was built without libzmq (CMake
 * found no pkg-config libzmq): every entry point says so. Install
 * libzmq3-dev and rebuild to get transport_zmq.c instead. */
#include "ps/transport.h"

#include <string.h>

static st_status not_built(void) {
  return st_error(ST_ERR_NOT_BUILT,
                  "this build of Strata has no ZeroMQ: install libzmq3-dev (Debian) and rebuild "
                  "(make) to use parameter_server");
}

bool st__ps_transport_built(void) { return false; }

st_status st__ps_transport_create(const st_ps_transport_options *o, st_ps_transport **out) {
  (void)o;
  *out = NULL;
  return not_built();
}

void st__ps_transport_destroy(st_ps_transport *t) { (void)t; }
int64_t st__ps_transport_refused(st_ps_transport *t) { return (void)t, 0; }
void st__ps_transport_report_refusals(st_ps_transport *t, const char *who,
                                      void (*say)(void *user, const char *line), void *user) {
  (void)t, (void)who, (void)say, (void)user;
}

st_status st__ps_listen(st_ps_transport *t, const st_ps_task *self, st_ps_socket **out) {
  (void)t, (void)self;
  *out = NULL;
  return not_built();
}

st_status st__ps_connect(st_ps_transport *t, const st_ps_task *peer, st_ps_socket **out) {
  (void)t, (void)peer;
  *out = NULL;
  return not_built();
}

void st__ps_socket_close(st_ps_socket *s) { (void)s; }

st_status st__ps_send(st_ps_socket *s, const st_ps_msg *to, st_ps_header *h, const void *payload,
                      size_t len, int timeout_ms) {
  (void)s, (void)to, (void)h, (void)payload, (void)len, (void)timeout_ms;
  return not_built();
}

st_status st__ps_recv(st_ps_socket *s, uint64_t job_id, int timeout_ms, st_ps_msg *out) {
  (void)s, (void)job_id, (void)timeout_ms;
  memset(out, 0, sizeof *out);
  return not_built();
}

void st__ps_msg_free(st_ps_msg *m) { (void)m; }

st_status st__ps_send_raw(st_ps_socket *s, const void *bytes, size_t len) {
  (void)s, (void)bytes, (void)len;
  return not_built();
}

st_status st__ps_poll(st_ps_socket **socks, int n, int timeout_ms, bool *ready) {
  (void)socks, (void)timeout_ms;
  for (int i = 0; i < n; i++) ready[i] = false;
  return not_built();
}

st_ps_counters st__ps_socket_counters(const st_ps_socket *s) {
  (void)s;
  st_ps_counters c;
  memset(&c, 0, sizeof c);
  return c;
}

st_status st__ps_keygen(const st_ps_cluster *c, const char *dir) {
  (void)c, (void)dir;
  return not_built();
}
