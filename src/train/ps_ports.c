/* st_ps_cluster_pick_ports (strata/ps.h): port 0 in a cluster's addresses
 * replaced by ports free now, so that a cluster run as threads of one
 * process (or started from one script) needs no hand-picked ports. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/args.h"
#include "strata/ps.h"

/* A TCP port of 127.0.0.1 free now (bound, read, released), not one of
 * taken[n] (the kernel may hand a port just released to the next bind);
 * -1 when none can be bound. */
static int free_port(const int *taken, int n) {
  for (int tries = 0; tries < 64; tries++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
      port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    if (port < 0) return -1;
    bool seen = false;
    for (int i = 0; i < n; i++) seen |= taken[i] == port;
    if (!seen) return port;
  }
  return -1;
}

/* Every "host:0" string of the role arrays of cluster gets a free port. */
static st_status pick(json_t *cluster) {
  int taken[3 * 256], n = 0;
  const char *role;
  json_t *tasks;
  json_object_foreach(cluster, role, tasks) {
    size_t i;
    json_t *addr;
    json_array_foreach(tasks, i, addr) {
      const char *s = json_string_value(addr);
      size_t len = s ? strlen(s) : 0;
      if (len < 3 || strcmp(s + len - 2, ":0") != 0) continue;
      if (n == (int)(sizeof taken / sizeof taken[0]))
        return st_error(ST_ERR_INVALID, "st_ps_cluster_pick_ports: more than %d ports 0", n);
      int port = free_port(taken, n);
      if (port < 0) return st_error(ST_ERR_IO, "st_ps_cluster_pick_ports: no free TCP port");
      taken[n++] = port;
      char buf[512];
      snprintf(buf, sizeof buf, "%.*s:%d", (int)(len - 2), s, port);
      json_array_set_new(tasks, i, json_string(buf));
    }
  }
  return ST_OK;
}

st_status st_ps_cluster_pick_ports(const char *tf_config, char **out) {
  ST_REQUIRE(tf_config);
  ST_REQUIRE(out);
  *out = NULL;
  json_error_t e;
  json_t *root = json_loads(tf_config, JSON_REJECT_DUPLICATES, &e);
  if (!root)
    return st_error(ST_ERR_FORMAT, "st_ps_cluster_pick_ports: line %d, column %d: %s", e.line,
                    e.column, e.text);
  json_t *cluster = json_object_get(root, "cluster");
  if (!cluster) cluster = root; /* the bare role map of a cluster file */
  st_status s = json_is_object(cluster) ? pick(cluster)
                : st_error(ST_ERR_FORMAT, "st_ps_cluster_pick_ports: \"cluster\" is not an object");
  if (s == ST_OK && !(*out = json_dumps(root, JSON_COMPACT)))
    s = st_error(ST_ERR_NOMEM, "st_ps_cluster_pick_ports: out of memory");
  json_decref(root);
  return s;
}
