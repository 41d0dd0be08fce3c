/* A TCP port on 127.0.0.1 that is free now (bound, read and released), for
 * the parameter-server tests that start servers in-process. Header-only,
 * like check.h. (examples/ps_cluster.c keeps its own copy: an example stands
 * alone.) */
#ifndef STRATA_TESTS_FREE_PORT_H
#define STRATA_TESTS_FREE_PORT_H
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static inline int free_port_once_(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* Never the same port twice in one process: the kernel may hand a port just
 * released to the next bind (a cluster's chief and ps then got one address). */
static inline int free_port(void) {
  static int given[256], n;
  for (int tries = 0; tries < 100; tries++) {
    int port = free_port_once_(), seen = 0;
    for (int i = 0; i < n; i++) seen |= given[i] == port;
    if (port < 0 || seen) continue;
    if (n < 256) given[n++] = port;
    return port;
  }
  return -1;
}

#endif
